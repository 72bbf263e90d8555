// main.go: tierfs-render, the part of helm's template engine that the
// tierfs chart uses, so that `make test` renders charts/tierfs the way
// `helm template` would, with no helm and no network.
//
// It is Go's text/template with sprig's TxtFuncMap (less env/expandenv, as
// in helm) plus helm's own functions: include, tpl, required, toYaml,
// fromYaml, fromYamlArray, toJson, fromJson, fromJsonArray, lookup (always
// empty, as in `helm template`). The values are the chart's values.yaml
// coalesced with each -f file in turn (maps merge deeply, a null deletes a
// key) and, as in helm, read through JSON, so every number is a float64.
// The root object has .Values, .Release (Name, Namespace, Service,
// IsInstall, IsUpgrade, Revision), .Chart (Name, Version, AppVersion,
// Description, Type, KubeVersion, APIVersion from Chart.yaml), .Capabilities
// (KubeVersion.{Version,Major,Minor,GitVersion}, APIVersions.Has) and
// .Template (Name, BasePath). missingkey=zero and "<no value>" is erased,
// as in helm. Chart.yaml's kubeVersion is checked against --kube-version.
//
// Output: every document of every rendered template (partials "_*" and
// NOTES.txt left out), in helm's install order, each as
// "---\n# Source: CHART/templates/FILE\n<document>\n" -- what `helm
// template` prints. --notes prints the rendered NOTES.txt instead.
// Errors go to stderr with exit status 1; usage errors exit 2.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/semver/v3"
	"github.com/Masterminds/sprig/v3"
	yaml "gopkg.in/yaml.v2"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// yamlToJSONValue reads YAML the way sigs.k8s.io/yaml (helm's reader)
// does: YAML to JSON, then JSON to Go values, so numbers are float64 and
// map keys strings.
func yamlToJSONValue(data []byte, out interface{}) error {
	var raw interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return err
	}
	conv, err := jsonable(raw)
	if err != nil {
		return err
	}
	j, err := json.Marshal(conv)
	if err != nil {
		return err
	}
	return json.Unmarshal(j, out)
}

// jsonable turns yaml.v2's map[interface{}]interface{} into
// map[string]interface{}, recursively.
func jsonable(v interface{}) (interface{}, error) {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, val := range t {
			c, err := jsonable(val)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = c
		}
		return m, nil
	case []interface{}:
		s := make([]interface{}, len(t))
		for i, val := range t {
			c, err := jsonable(val)
			if err != nil {
				return nil, err
			}
			s[i] = c
		}
		return s, nil
	default:
		return v, nil
	}
}

// toYAML is helm's toYaml: sigs.k8s.io/yaml.Marshal (JSON first, so keys
// sort and numbers print as JSON would), trailing newline trimmed.
func toYAML(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var ms yaml.MapSlice
	var any interface{}
	var out []byte
	if err := yaml.Unmarshal(j, &ms); err == nil && len(j) > 0 && j[0] == '{' {
		out, err = yaml.Marshal(ms)
		if err != nil {
			return ""
		}
	} else {
		if err := yaml.Unmarshal(j, &any); err != nil {
			return ""
		}
		out, err = yaml.Marshal(any)
		if err != nil {
			return ""
		}
	}
	return strings.TrimSuffix(string(out), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := yamlToJSONValue([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	a := []interface{}{}
	if err := yamlToJSONValue([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

func toJSON(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(j)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	a := []interface{}{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		a = []interface{}{err.Error()}
	}
	return a
}

// coalesce merges src over dst as helm merges a -f file over the chart's
// values: maps deeply, anything else replaced, a null deleting the key.
func coalesce(dst, src map[string]interface{}) {
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		sm, sIsMap := sv.(map[string]interface{})
		dm, dIsMap := dst[k].(map[string]interface{})
		if sIsMap && dIsMap {
			coalesce(dm, sm)
			continue
		}
		dst[k] = sv
	}
}

type apiVersions []string

// Has is .Capabilities.APIVersions.Has: "group/version" or
// "group/version/Kind".
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type engine struct {
	chartName string
	tmpl      *template.Template
	funcs     template.FuncMap
}

func (e *engine) include(name string, data interface{}) (string, error) {
	var buf bytes.Buffer
	if err := e.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func (e *engine) tpl(text string, data interface{}) (string, error) {
	t, err := e.tmpl.Clone()
	if err != nil {
		return "", err
	}
	t, err = t.New("tpl").Parse(text)
	if err != nil {
		return "", fmt.Errorf("tpl: %v", err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("tpl: %v", err)
	}
	return strings.Replace(buf.String(), "<no value>", "", -1), nil
}

func required(msg string, v interface{}) (interface{}, error) {
	if v == nil {
		return v, errors.New(msg)
	}
	if s, ok := v.(string); ok && s == "" {
		return v, errors.New(msg)
	}
	return v, nil
}

func (e *engine) funcMap() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["fromJsonArray"] = fromJSONArray
	f["required"] = required
	f["include"] = e.include
	f["tpl"] = e.tpl
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	return f
}

// helm's install order (releaseutil.InstallOrder); other kinds go last,
// sorted by kind.
var installOrder = []string{
	"PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota",
	"LimitRange", "PodSecurityPolicy", "PodDisruptionBudget",
	"ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
	"PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition",
	"ClusterRole", "ClusterRoleList", "ClusterRoleBinding",
	"ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
	"RoleBindingList", "Service", "DaemonSet", "Pod",
	"ReplicationController", "ReplicaSet", "Deployment",
	"HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob",
	"IngressClass", "Ingress", "APIService",
}

var sep = regexp.MustCompile(`(?:^|\s*\n)---\s*`)

type doc struct {
	source, kind, text string
	order               int
}

func kindOf(text string) (string, error) {
	var head struct {
		Kind string `yaml:"kind"`
	}
	if err := yaml.Unmarshal([]byte(text), &head); err != nil {
		return "", err
	}
	return head.Kind, nil
}

func readChart(dir string) (map[string]interface{}, error) {
	data, err := ioutil.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	var md map[string]interface{}
	if err := yamlToJSONValue(data, &md); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %v", err)
	}
	if md["apiVersion"] != "v2" {
		return nil, fmt.Errorf("Chart.yaml: apiVersion must be v2 (Helm 3)")
	}
	for _, k := range []string{"name", "version"} {
		if s, _ := md[k].(string); s == "" {
			return nil, fmt.Errorf("Chart.yaml: %s is required", k)
		}
	}
	if _, err := semver.StrictNewVersion(md["version"].(string)); err != nil {
		return nil, fmt.Errorf("Chart.yaml: version %q is not SemVer 2: %v",
			md["version"], err)
	}
	str := func(k string) string { s, _ := md[k].(string); return s }
	return map[string]interface{}{
		"Name": str("name"), "Version": str("version"),
		"AppVersion": str("appVersion"), "Description": str("description"),
		"Type": str("type"), "KubeVersion": str("kubeVersion"),
		"APIVersion": str("apiVersion"),
	}, nil
}

func run() error {
	var files, apis multiFlag
	chartDir := flag.String("chart", "", "the chart directory")
	name := flag.String("name", "tierfs", "release name")
	ns := flag.String("namespace", "default", "release namespace")
	kube := flag.String("kube-version", "v1.30.0", "Kubernetes version for .Capabilities")
	notes := flag.Bool("notes", false, "print the rendered NOTES.txt instead of the manifests")
	strict := flag.Bool("strict", false, "fail on a missing value (helm --strict)")
	flag.Var(&files, "f", "a values file (repeatable; later wins)")
	flag.Var(&apis, "api-versions", "an API version for .Capabilities.APIVersions (repeatable)")
	flag.Parse()
	if *chartDir == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	chart, err := readChart(*chartDir)
	if err != nil {
		return err
	}
	kv, err := semver.NewVersion(*kube)
	if err != nil {
		return fmt.Errorf("--kube-version %q: %v", *kube, err)
	}
	if c := chart["KubeVersion"].(string); c != "" {
		cons, err := semver.NewConstraint(c)
		if err != nil {
			return fmt.Errorf("Chart.yaml: kubeVersion %q: %v", c, err)
		}
		if !cons.Check(kv) {
			return fmt.Errorf("chart requires kubeVersion: %s which is "+
				"incompatible with Kubernetes %s", c, *kube)
		}
	}

	values := map[string]interface{}{}
	data, err := ioutil.ReadFile(filepath.Join(*chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	if err := yamlToJSONValue(data, &values); err != nil {
		return fmt.Errorf("values.yaml: %v", err)
	}
	for _, f := range files {
		data, err := ioutil.ReadFile(f)
		if err != nil {
			return err
		}
		over := map[string]interface{}{}
		if err := yamlToJSONValue(data, &over); err != nil {
			return fmt.Errorf("%s: %v", f, err)
		}
		coalesce(values, over)
	}

	cname := chart["Name"].(string)
	e := &engine{chartName: cname}
	e.tmpl = template.New(cname)
	e.funcs = e.funcMap()
	e.tmpl.Funcs(e.funcs)
	if *strict {
		e.tmpl.Option("missingkey=error")
	} else {
		e.tmpl.Option("missingkey=zero")
	}
	tdir := filepath.Join(*chartDir, "templates")
	var names []string
	err = filepath.Walk(tdir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(tdir, p)
		tname := path.Join(cname, "templates", filepath.ToSlash(rel))
		text, err := ioutil.ReadFile(p)
		if err != nil {
			return err
		}
		if _, err := e.tmpl.New(tname).Parse(string(text)); err != nil {
			return err
		}
		names = append(names, tname)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)

	gitv := "v" + kv.String()
	root := func(tname string) map[string]interface{} {
		return map[string]interface{}{
			"Values": values,
			"Release": map[string]interface{}{
				"Name": *name, "Namespace": *ns, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Chart": chart,
			"Capabilities": map[string]interface{}{
				"KubeVersion": map[string]interface{}{
					"Version": gitv, "GitVersion": gitv,
					"Major": fmt.Sprint(kv.Major()),
					"Minor": fmt.Sprint(kv.Minor()),
				},
				"APIVersions": apiVersions(apis),
			},
			"Template": map[string]interface{}{
				"Name": tname, "BasePath": path.Join(cname, "templates"),
			},
		}
	}
	render := func(tname string) (string, error) {
		var buf bytes.Buffer
		if err := e.tmpl.ExecuteTemplate(&buf, tname, root(tname)); err != nil {
			return "", err
		}
		return strings.Replace(buf.String(), "<no value>", "", -1), nil
	}

	if *notes {
		out, err := render(path.Join(cname, "templates", "NOTES.txt"))
		if err != nil {
			return err
		}
		fmt.Print(out)
		return nil
	}
	rank := map[string]int{}
	for i, k := range installOrder {
		rank[k] = i
	}
	var docs []doc
	for _, tname := range names {
		base := path.Base(tname)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		out, err := render(tname)
		if err != nil {
			return err
		}
		for _, part := range sep.Split(out, -1) {
			text := strings.TrimSpace(part)
			if text == "" {
				continue
			}
			kind, err := kindOf(text)
			if err != nil {
				return fmt.Errorf("%s: the rendered YAML does not parse: %v",
					tname, err)
			}
			r, ok := rank[kind]
			if !ok {
				r = len(installOrder)
			}
			docs = append(docs, doc{tname, kind, text, r})
		}
	}
	sort.SliceStable(docs, func(i, j int) bool {
		if docs[i].order != docs[j].order {
			return docs[i].order < docs[j].order
		}
		if docs[i].order == len(installOrder) && docs[i].kind != docs[j].kind {
			return docs[i].kind < docs[j].kind
		}
		return false
	})
	for _, d := range docs {
		fmt.Printf("---\n# Source: %s\n%s\n", d.source, d.text)
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "tierfs-render: %v\n", err)
		os.Exit(1)
	}
}
