// GOPATH mode only (make build/tierfs-render, GO111MODULE=off): a go.mod
// beside the code is what lets GOPATH mode resolve the .../v3 import paths
// of sprig and semver to Debian's /usr/share/gocode. No requirements: the
// packages come from golang-github-masterminds-sprig-dev, not a proxy.
module tierfs.dev/render

go 1.19
