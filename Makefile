# tierfs: build, test, demo and benchmark entry points.
#
#   make deps    install every Debian package tierfs needs (idempotent)
#   make         build build/tierfsctl, build/tierfs and build/tierfs-csi
#   make test    deps + build + unit tests (plain and ASan/UBSan)
#                + integration tests against a local Swift S3
#   make csi-test  the tierfs-csi pytest suite alone (no S3)
#   make deploy-test  the chart, manifests and fio Job checks alone (no S3)
#   make deploy-manifests  regenerate deploy/kustomize and the fio ConfigMap
#   make image   the container images, with buildah (not part of make test)
#   make demo    deps + build + an end-to-end run against the local S3
#   make bench   deps + build + every issue-6 workload on tierfs, rclone, s3fs,
#                the local disk and raw S3 (bench/results/bench.{txt,json,png})
#   make check   clang-format and cppcheck
#   make clean

CC       ?= cc
V        ?= 0
Q        := $(if $(filter 1,$(V)),,@)
PYTHON   := /usr/bin/python3
BUILD    := build
ASAN     := $(BUILD)/asan

PKGS     := libcurl openssl expat sqlite3 fuse3
CFLAGS_BASE := -std=gnu11 -Wall -Wextra -Werror -Wshadow -Wpointer-arith \
	-Wstrict-prototypes -Wmissing-prototypes -Wno-missing-field-initializers \
	-D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -pthread -g \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CFLAGS   ?= -O2 -DNDEBUG
CFLAGS   += $(CFLAGS_BASE)
LDLIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -pthread
SANFLAGS := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
	-fno-sanitize-recover=undefined

S3_SRC   := s3/buf.c s3/uri.c s3/sigv4.c s3/retry.c s3/xml.c s3/creds.c \
	s3/s3.c s3/transfer.c s3/s3ctl.c s3/units.c
CACHE_SRC := cache/acl.c cache/opens.c cache/walbuf.c cache/meta.c cache/layout.c \
	cache/ranges.c cache/data.c cache/index.c cache/serve.c cache/lease.c \
	cache/health.c cache/fs.c
# tierfs-csi: gRPC C core + protobuf-c; its protobuf code is generated from
# proto/csi.proto (and the two well-known types it imports) into build/gen
CSI_SRC  := csi/main.c csi/server.c csi/identity.c csi/controller.c csi/node.c \
	csi/volume.c csi/s3conn.c csi/launcher.c
GEN      := $(BUILD)/gen
GEN_SRC  := csi.pb-c.c google/protobuf/wrappers.pb-c.c \
	google/protobuf/timestamp.pb-c.c
PROTO_INC := /usr/include
CSI_CPPFLAGS := -I$(GEN) $(shell pkg-config --cflags grpc libprotobuf-c 2>/dev/null)
CSI_LDLIBS := $(shell pkg-config --libs grpc libprotobuf-c 2>/dev/null) -pthread
CSI_OBJ  := $(CSI_SRC:%.c=$(BUILD)/obj/%.o) $(GEN_SRC:%.c=$(BUILD)/obj/gen/%.o)
CSI_ASAN_OBJ := $(CSI_SRC:%.c=$(ASAN)/obj/%.o) $(GEN_SRC:%.c=$(ASAN)/obj/gen/%.o)
UNIT_TESTS := test_sigv4 test_uri test_xml test_retry test_creds test_buf \
	test_meta test_layout test_ranges test_data test_units test_volume \
	test_condition test_acl test_opens test_walbuf
INTEG_TESTS := test_s3_live

.PHONY: all deps test unit integration print-unit-tests csi-test deploy-test deploy-manifests \
	image demo bench check format clean asan
# keep object files between runs (they are intermediates of the test rules)
.SECONDARY:

all: $(BUILD)/tierfsctl $(BUILD)/tierfs $(BUILD)/tierfs-csi

deps:
	@hack/install-deps.sh

# --- objects: one tree per flavour ------------------------------------------
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(ASAN)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC asan $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(SANFLAGS) -MMD -MP -c $< -o $@

# --- generated protobuf-c code (tierfs-csi) ---------------------------------
$(GEN)/csi.pb-c.h $(GEN_SRC:%.c=$(GEN)/%.c) &: proto/csi.proto
	@mkdir -p $(GEN)
	@echo "  PROTOC  $<"
	$(Q)protoc-c -I proto -I $(PROTO_INC) --c_out=$(GEN) proto/csi.proto \
		google/protobuf/wrappers.proto google/protobuf/timestamp.proto

# generated code: warnings stay visible, but another protoc-c version's
# warnings must not break the build
$(BUILD)/obj/gen/%.o: $(GEN)/%.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CSI_CPPFLAGS) $(CFLAGS) -Wno-error -MMD -MP -c $< -o $@

$(ASAN)/obj/gen/%.o: $(GEN)/%.c
	@mkdir -p $(dir $@)
	@echo "  CC asan $<"
	$(Q)$(CC) $(CSI_CPPFLAGS) $(CFLAGS_BASE) $(SANFLAGS) -Wno-error -MMD -MP -c $< -o $@

$(CSI_SRC:%.c=$(BUILD)/obj/%.o) $(CSI_SRC:%.c=$(ASAN)/obj/%.o): CPPFLAGS += $(CSI_CPPFLAGS)
$(CSI_SRC:%.c=$(BUILD)/obj/%.o) $(CSI_SRC:%.c=$(ASAN)/obj/%.o): | $(GEN)/csi.pb-c.h

$(BUILD)/libtierfs-s3.a: $(S3_SRC:%.c=$(BUILD)/obj/%.o) Makefile
	$(Q)rm -f $@ && $(AR) rcs $@ $(filter %.o,$^)

$(ASAN)/libtierfs-s3.a: $(S3_SRC:%.c=$(ASAN)/obj/%.o) Makefile
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && $(AR) rcs $@ $(filter %.o,$^)

$(BUILD)/libtierfs-cache.a: $(CACHE_SRC:%.c=$(BUILD)/obj/%.o) Makefile
	$(Q)rm -f $@ && $(AR) rcs $@ $(filter %.o,$^)

$(ASAN)/libtierfs-cache.a: $(CACHE_SRC:%.c=$(ASAN)/obj/%.o) Makefile
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && $(AR) rcs $@ $(filter %.o,$^)

$(BUILD)/tierfsctl: $(BUILD)/obj/csi/tierfsctl.o $(BUILD)/libtierfs-s3.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tierfs: $(BUILD)/obj/cache/mount.o $(BUILD)/libtierfs-cache.a $(BUILD)/libtierfs-s3.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(ASAN)/tierfs: $(ASAN)/obj/cache/mount.o $(ASAN)/libtierfs-cache.a $(ASAN)/libtierfs-s3.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS_BASE) $(SANFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tierfs-csi: $(CSI_OBJ) $(BUILD)/libtierfs-s3.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(CSI_LDLIBS) $(LDLIBS)

$(ASAN)/tierfs-csi: $(CSI_ASAN_OBJ) $(ASAN)/libtierfs-s3.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS_BASE) $(SANFLAGS) -o $@ $^ $(CSI_LDLIBS) $(LDLIBS)

$(ASAN)/tierfsctl: $(ASAN)/obj/csi/tierfsctl.o $(ASAN)/libtierfs-s3.a
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS_BASE) $(SANFLAGS) -o $@ $^ $(LDLIBS)

# --- fuse-floor: an empty FUSE server, the cost of one request (make bench) -
$(BUILD)/fuse-floor: $(BUILD)/obj/tests/bench/fusefloor.o
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# --- tierfs-render: helm's template engine for the chart checks -------------
# Go from Debian (golang-go, golang-github-masterminds-sprig-dev), built
# offline in GOPATH mode. The source is copied under a GOPATH with its
# go.mod, which is what lets GOPATH mode resolve sprig's .../v3 imports.
RENDER_SRC := tests/deploy/render/main.go tests/deploy/render/go.mod
RENDER_PKG := $(BUILD)/gopath/src/tierfs.dev/render
$(BUILD)/tierfs-render: $(RENDER_SRC)
	@mkdir -p $(RENDER_PKG) $(BUILD)/gocache
	@echo "  GO      $@"
	$(Q)cp $(RENDER_SRC) $(RENDER_PKG)/
	$(Q)cd $(RENDER_PKG) && GO111MODULE=off GOFLAGS= GOPROXY=off \
		GOPATH=$(abspath $(BUILD)/gopath):/usr/share/gocode \
		GOCACHE=$(abspath $(BUILD)/gocache) go build -o $(abspath $@) .

# --- tests -----------------------------------------------------------------
# unit tests of csi/ code link the csi object they test
$(BUILD)/tests/test_volume: $(BUILD)/obj/csi/volume.o
$(ASAN)/tests/test_volume: $(ASAN)/obj/csi/volume.o
$(BUILD)/tests/test_condition: $(BUILD)/obj/csi/launcher.o
$(ASAN)/tests/test_condition: $(ASAN)/obj/csi/launcher.o
$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/libtierfs-cache.a $(BUILD)/libtierfs-s3.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

$(ASAN)/tests/%: $(ASAN)/obj/tests/unit/%.o $(ASAN)/libtierfs-cache.a $(ASAN)/libtierfs-s3.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS_BASE) $(SANFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

$(BUILD)/tests/test_s3_live: $(BUILD)/obj/tests/integration/test_s3_live.o $(BUILD)/libtierfs-s3.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

$(ASAN)/tests/test_s3_live: $(ASAN)/obj/tests/integration/test_s3_live.o $(ASAN)/libtierfs-s3.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS_BASE) $(SANFLAGS) -o $@ $^ $(LDLIBS) -lcmocka

TEST_BINS := $(UNIT_TESTS:%=$(BUILD)/tests/%) $(UNIT_TESTS:%=$(ASAN)/tests/%) \
	$(INTEG_TESTS:%=$(ASAN)/tests/%) $(ASAN)/tierfsctl $(ASAN)/tierfs \
	$(ASAN)/tierfs-csi $(BUILD)/tierfs-render $(BUILD)/fuse-floor

asan: $(ASAN)/tierfsctl $(ASAN)/tierfs $(ASAN)/tierfs-csi

test: deps
	@$(MAKE) --no-print-directory all $(TEST_BINS)
	@hack/run-tests.sh

print-unit-tests:
	@printf '%s\n' $(UNIT_TESTS)

unit: all $(UNIT_TESTS:%=$(BUILD)/tests/%) $(UNIT_TESTS:%=$(ASAN)/tests/%)
	@TIERFS_ONLY=unit hack/run-tests.sh

integration: all $(TEST_BINS)
	@TIERFS_ONLY=integration hack/run-tests.sh

csi-test: $(ASAN)/tierfs-csi
	@TIERFS_ONLY=csi hack/run-tests.sh

deploy-test: all $(BUILD)/tierfs-render $(BUILD)/fuse-floor
	@TIERFS_ONLY=deploy hack/run-tests.sh

deploy-manifests: $(BUILD)/tierfs-render
	@$(PYTHON) tests/deploy/gen_manifests.py

# The images of deploy/Dockerfile: tierfs (tierfs-csi, tierfs, tierfsctl)
# and tierfs-fio (the fio Job of deploy/bench). buildah only; no CI step
# builds them (the base image comes from a registry).
IMAGE_REPO ?= localhost/tierfs
IMAGE_TAG  ?= $(shell sed -n 's/^\#define CSI_PLUGIN_VERSION "\(.*\)"/\1/p' csi/plugin.h)
image:
	@command -v buildah >/dev/null 2>&1 || { \
		echo "make image: buildah not found (apt-get install buildah)"; \
		exit 1; }
	buildah bud --layers -f deploy/Dockerfile --target runtime \
		-t $(IMAGE_REPO):$(IMAGE_TAG) .
	buildah bud --layers -f deploy/Dockerfile --target fio \
		-t $(IMAGE_REPO)-fio:$(IMAGE_TAG) .

demo: deps
	@$(MAKE) --no-print-directory all
	@hack/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all $(BUILD)/fuse-floor
	@hack/bench.sh

C_FILES = $(shell find s3 csi cache tests -name '*.[ch]' 2>/dev/null)

check: all
	clang-format --dry-run -Werror $(C_FILES)
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
		--inline-suppr --std=c11 -D_GNU_SOURCE -I s3 \
		--suppress=missingIncludeSystem s3 cache csi tests/unit tests/integration

format:
	clang-format -i $(C_FILES)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
