# callerauth — every target installs or builds what it needs by itself.
#
#   make test    every test, with -race (the CI entry point)
#   make lint    go vet, gofmt and golangci-lint (pinned in tools/go.mod)
#   make bench   the benchmarks, with allocations
#   make bench-compare   callerauth beside OPA and the other peers, as ratios
#   make demo    go run ./cmd/callerauth demo
#   make fuzz    a short run of every fuzz test
#   make images  one OCI image per binary, with SBOMs, into dist/images (docs/deploy.md)

GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 15s
BENCHTIME ?= 1s
# One test binary's limit. go test's own default, 10 minutes, is too short
# for test/chart on a cold Go build cache: it builds every image (seven
# static binaries) before the first container runs.
TEST_TIMEOUT ?= 30m
# Caches that make test may fill live here; the folder is ignored by git.
CACHE     := $(CURDIR)/.cache
LINT      := $(GO) tool -modfile=tools/go.mod golangci-lint

# A real kube-apiserver and etcd for the integration tests in test/, built
# from Go modules in their own tools module (test/tools/kube) and cached by
# version. Cold: about 10-15 minutes on 2 cores; warm (Go build cache): seconds.
KUBE_VERSION := v1.37.2
KUBE_BIN     := $(CACHE)/kube/$(KUBE_VERSION)
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
                -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37
export CALLERAUTH_KUBE_BIN := $(KUBE_BIN)

# Ory Hydra, a real OAuth2/OIDC provider, as each tenant's identity provider
# in the vmafx operator's end-to-end tests: built from its Go module in a
# tools module of its own (test/tools/hydra, with the replace its own go.mod
# needs), with cgo and SQLite for DSN=memory. About 2-4 minutes cold;
# internal/kit/hydra starts it (a missing binary fails those tests, never skips).
HYDRA_VERSION := v2.3.0
HYDRA_BIN     := $(CACHE)/hydra/$(HYDRA_VERSION)
export CALLERAUTH_HYDRA_BIN := $(HYDRA_BIN)

# OPA, the peer of the pdp in make bench-compare and the agreement test of
# the example policy in Rego: built from its Go module in a tools module of
# its own (test/tools/opa). About 5 minutes cold.
OPA_VERSION := v1.22.3
OPA_BIN     := $(CACHE)/opa/$(OPA_VERSION)
export CALLERAUTH_OPA_BIN := $(OPA_BIN)

# Jaeger (its v2 binary, an OpenTelemetry Collector distribution), the OTLP
# receiver the trace tests (test/traces) export to and read back from:
# built from its Go module in a tools module of its own (test/tools/jaeger).
# About 4 minutes cold.
JAEGER_VERSION := v1.75.0
JAEGER_BIN     := $(CACHE)/jaeger/$(JAEGER_VERSION)
export CALLERAUTH_JAEGER_BIN := $(JAEGER_BIN)

# The decision log's outside auditors and witness (test/pdp's witnessed
# log, docs/decision-log.md): tessera's cmd/fsck (v1.0.4),
# transparency-dev/witness's omniwitness and tlogproofcheck (formats and
# merkle check a C2SP tlog-proof), built in a tools module of their own
# (test/tools/tlog), cached by what that module pins. About 2 minutes cold.
TLOG_BIN := $(CACHE)/tlog/$(shell cat test/tools/tlog/go.sum test/tools/tlog/tlogproofcheck/main.go | sha256sum | cut -c1-12)
export CALLERAUTH_TLOG_BIN := $(TLOG_BIN)

# The images: FROM scratch, static, non-root, reproducible; written as OCI
# layouts and docker load tarballs with an SPDX SBOM each, no registry and
# no daemon (docs/deploy.md). The tag is the VERSION file's, which every
# chart's appVersion names.
VERSION        := $(shell cat VERSION)
IMAGE_REGISTRY ?= ghcr.io/callerauth
IMAGE_TAG      ?= $(VERSION)
IMAGES_OUT     ?= $(CURDIR)/dist/images
PLATFORMS      ?=

.PHONY: all test lint images runc skopeo bench bench-compare demo fuzz tidy clean kube-tools node-tools cluster generate monitoring-crds ffmpeg postgresql hydra-tools opa-tools jaeger-tools tlog-tools

all: lint test

test: kube-tools node-tools hydra-tools opa-tools jaeger-tools tlog-tools ffmpeg postgresql runc skopeo
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

# $(call apt-install,PACKAGE,WHY): Debian's PACKAGE, installed with apt-get
# when make runs as root (CI does); otherwise this says what to install.
define apt-install
if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
  echo "installing $(1) ($(2))"; \
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
else \
  echo "make test needs $(1) ($(2)): install it - apt-get install $(1)"; exit 1; \
fi
endef

# ffmpeg is the reference the vmafx node's PSNR and SSIM are checked
# against.
ffmpeg:
	@command -v ffmpeg >/dev/null 2>&1 || { $(call apt-install,ffmpeg,the reference for the vmafx measurement tests); }

# runc runs each image make images builds under its chart's securityContext
# (test/chart); the tests create containers, as root.
runc:
	@command -v runc >/dev/null 2>&1 || { $(call apt-install,runc,the image tests run every image under its chart's securityContext); }

# skopeo reads what make images writes — the OCI layouts and the docker
# load tarballs — as a registry client would (test/chart).
skopeo:
	@command -v skopeo >/dev/null 2>&1 || { $(call apt-install,skopeo,the image tests read every image with it); }

# PostgreSQL is the replicated datastore the store and replica tests run
# against (internal/kit/pgtest starts a server per test: initdb, a
# Unix socket, a random port). Debian's postgresql package, installed when
# its server binaries are missing, as root; otherwise this says what to
# install. CALLERAUTH_PG_BIN points elsewhere.
postgresql:
	@if [ -z "$$CALLERAUTH_PG_BIN" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql (the replicated datastore's tests)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else \
	    echo "make test needs PostgreSQL's server binaries: install them, e.g. apt-get install postgresql, or set CALLERAUTH_PG_BIN"; exit 1; \
	  fi; fi

kube-tools: $(KUBE_BIN)/kube-apiserver $(KUBE_BIN)/etcd

$(KUBE_BIN)/kube-apiserver:
	@mkdir -p $(KUBE_BIN)
	cd test/tools/kube && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/kube-apiserver
	mv $@.tmp $@

$(KUBE_BIN)/etcd:
	@mkdir -p $(KUBE_BIN)
	cd test/tools/kube && $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp go.etcd.io/etcd/server/v3
	mv $@.tmp $@

# A node for test/cluster and make cluster (internal/kit/cluster): the
# kubelet, kube-scheduler, kube-controller-manager and kube-proxy of the
# same k8s.io/kubernetes, containerd, its runc shim and ctr from
# containerd's Go module (Debian's containerd is too old for a 1.37
# kubelet), and Debian's runc, CNI plugins and iptables; kubectl and helm
# for a person (make cluster). Cold: a few
# minutes more than kube-tools, whose packages they share.
CONTAINERD_VERSION := v2.4.2
CONTAINERD_BIN     := $(CACHE)/containerd/$(CONTAINERD_VERSION)
export CALLERAUTH_CONTAINERD_BIN := $(CONTAINERD_BIN)
NODE_KUBE := kubelet kube-scheduler kube-controller-manager kube-proxy kubectl
NODE_CONTAINERD := containerd containerd-shim-runc-v2 ctr

node-tools: kube-tools runc $(addprefix $(KUBE_BIN)/,$(NODE_KUBE) helm) $(addprefix $(CONTAINERD_BIN)/,$(NODE_CONTAINERD))
	@test -x /usr/lib/cni/bridge || { $(call apt-install,containernetworking-plugins,the test cluster's pod network); }
	@command -v iptables >/dev/null 2>&1 || { $(call apt-install,iptables,kube-proxy's rules in the test cluster); }

$(addprefix $(KUBE_BIN)/,$(NODE_KUBE)):
	@mkdir -p $(KUBE_BIN)
	cd test/tools/kube && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@.tmp k8s.io/kubernetes/cmd/$(notdir $@)
	mv $@.tmp $@

# helm, beside kubectl, for docs/deploy.md's "Try it on a node", from a
# tools module of its own (test/tools/helm).
$(KUBE_BIN)/helm:
	@mkdir -p $(KUBE_BIN)
	cd test/tools/helm && $(GO) build -trimpath -ldflags '-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0' -o $@.tmp helm.sh/helm/v3/cmd/helm
	mv $@.tmp $@

$(addprefix $(CONTAINERD_BIN)/,$(NODE_CONTAINERD)):
	@mkdir -p $(CONTAINERD_BIN)
	cd test/tools/containerd && CGO_ENABLED=0 $(GO) build -trimpath -tags 'no_btrfs no_devmapper no_zfs' \
	  -ldflags '-s -w -X github.com/containerd/containerd/v2/version.Version=$(CONTAINERD_VERSION)' \
	  -o $@.tmp github.com/containerd/containerd/v2/cmd/$(notdir $@)
	mv $@.tmp $@

# A cluster of one node on this machine, for a person: prints how to reach
# it and runs until interrupted, then stops everything it started (root).
# CLUSTER_FLAGS=--images=false starts it without building the images.
cluster: node-tools
	@if [ -s .cache/cluster/pid ] && kill -0 "$$(cat .cache/cluster/pid)" 2>/dev/null; then \
	  echo "a cluster runs already (pid $$(cat .cache/cluster/pid)): stop it first"; exit 1; fi
	@rm -f .cache/cluster/env .cache/cluster/pid .cache/cluster/kubeconfig
	$(GO) run ./cmd/dev-cluster $(CLUSTER_FLAGS)

opa-tools: $(OPA_BIN)/opa

$(OPA_BIN)/opa:
	@mkdir -p $(OPA_BIN)
	cd test/tools/opa && $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp github.com/open-policy-agent/opa
	mv $@.tmp $@

jaeger-tools: $(JAEGER_BIN)/jaeger

$(JAEGER_BIN)/jaeger:
	@mkdir -p $(JAEGER_BIN)
	cd test/tools/jaeger && $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp github.com/jaegertracing/jaeger/cmd/jaeger
	mv $@.tmp $@

tlog-tools: $(TLOG_BIN)/fsck

$(TLOG_BIN)/fsck:
	@mkdir -p $(TLOG_BIN)
	cd test/tools/tlog && $(GO) build -trimpath -ldflags '-s -w' -o $(TLOG_BIN)/omniwitness.tmp github.com/transparency-dev/witness/cmd/omniwitness
	cd test/tools/tlog && $(GO) build -trimpath -ldflags '-s -w' -o $(TLOG_BIN)/tlogproofcheck.tmp ./tlogproofcheck
	cd test/tools/tlog && $(GO) build -trimpath -ldflags '-s -w' -o $@.tmp github.com/transparency-dev/tessera/cmd/fsck
	mv $(TLOG_BIN)/omniwitness.tmp $(TLOG_BIN)/omniwitness
	mv $(TLOG_BIN)/tlogproofcheck.tmp $(TLOG_BIN)/tlogproofcheck
	mv $@.tmp $@

hydra-tools: $(HYDRA_BIN)/hydra

$(HYDRA_BIN)/hydra:
	@mkdir -p $(HYDRA_BIN)
	cd test/tools/hydra && CGO_ENABLED=1 $(GO) build -trimpath -tags sqlite,sqlite_omit_load_extension -o $@.tmp github.com/ory/hydra/v2
	mv $@.tmp $@

lint:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(LINT) run $(PKGS)

# The end-to-end packages under test/ have no benchmarks, and their TestMain
# would start a kube-apiserver for nothing.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) $$($(GO) list $(PKGS) | grep -v /test/)

# callerauth beside its peers in one run: the pdp and OPA under the same
# load, the paired benchmarks; the table goes into docs/performance.md.
BENCH_DURATION ?= 10s
BENCH_COUNT ?= 3
bench-compare: opa-tools
	$(GO) run ./cmd/bench-compare --opa $(OPA_BIN)/opa --duration $(BENCH_DURATION) --benchtime $(BENCHTIME) --count $(BENCH_COUNT)

demo:
	$(GO) run ./cmd/callerauth demo

images:
	$(GO) run ./cmd/images --out $(IMAGES_OUT) --registry $(IMAGE_REGISTRY) --tag $(IMAGE_TAG) --platforms '$(PLATFORMS)'

# Every fuzz test in the tree, each for FUZZTIME: the packages and names are
# found by grep, so a new fuzz test is run without touching this file.
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./.cache/' | xargs -n1 dirname | sort -u); do \
	  for name in $$(grep -h '^func Fuzz' $$dir/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "== $$dir $$name"; $(GO) test -run='^$$' -fuzz="^$$name\$$" -fuzztime=$(FUZZTIME) $$dir; \
	  done; \
	done

# Regenerates the Go code committed beside the protos (buf, protoc-gen-go and
# protoc-gen-go-grpc pinned in tools/go.mod), lints the protos, and
# regenerates the VmafxJob deepcopy functions and CRD (controller-gen).
generate:
	cd api && $(GO) tool -modfile=../tools/go.mod buf lint && $(GO) tool -modfile=../tools/go.mod buf generate
	$(GO) tool -modfile=tools/go.mod controller-gen object paths=./api/vmafxjob/... crd:crdVersions=v1 output:crd:artifacts:config=deploy/crds
	cp deploy/crds/vmafx.callerauth.dev_vmafxjobs.yaml deploy/charts/vmafx/crds/
	$(MAKE) monitoring-crds

# The Prometheus Operator's ServiceMonitor and PrometheusRule CRDs that
# test/chart applies the charts' monitors against, generated by controller-gen
# from the types of its Go module (which ships no CRD files), in a scratch
# module under .cache.
MONITORING_VERSION := v0.95.2
MONITORING_PKG     := github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
monitoring-crds:
	rm -rf $(CACHE)/monitoring-crds && mkdir -p $(CACHE)/monitoring-crds/mod
	$(GO) build -modfile=tools/go.mod -o $(CACHE)/monitoring-crds/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	cd $(CACHE)/monitoring-crds/mod && printf 'module crdgen\n\ngo 1.26\n' > go.mod && \
		printf 'package main\n\nimport _ "$(MONITORING_PKG)/v1"\n\nfunc main() {}\n' > main.go && \
		$(GO) get $(MONITORING_PKG)@$(MONITORING_VERSION) && $(GO) mod tidy && \
		../controller-gen crd:crdVersions=v1 paths=$(MONITORING_PKG)/v1 output:crd:dir=../out
	cp $(CACHE)/monitoring-crds/out/monitoring.coreos.com_servicemonitors.yaml $(CACHE)/monitoring-crds/out/monitoring.coreos.com_prometheusrules.yaml test/testdata/crds/

tidy:
	$(GO) mod tidy
	cd tools && $(GO) mod tidy
	cd test/tools/kube && $(GO) mod tidy
	cd test/tools/hydra && $(GO) mod tidy
	cd test/tools/jaeger && $(GO) mod tidy
	cd test/tools/tlog && $(GO) mod tidy

clean:
	rm -rf $(CACHE)
