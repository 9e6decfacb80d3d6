# dpd: everything a fresh Debian machine needs, as root, from two targets:
#   make demo   - install dependencies, build, run the three-workload demo
#   make test   - install dependencies, check generated code, lint, test (-race)
SHELL := /bin/bash
export PATH := $(CURDIR)/bin:/usr/local/go/bin:$(PATH)
export GOBIN := $(CURDIR)/bin
export GOTOOLCHAIN := local

BUF_VERSION           := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GRPC_VERSION := v1.6.1
GOLANGCI_VERSION      := v2.15.0
GRPCURL_VERSION       := v1.9.4
APT_PACKAGES := clang-19 llvm-19 bpftool libbpf-dev linux-libc-dev protobuf-compiler nftables \
	iproute2 iputils-ping netcat-openbsd ca-certificates make

GO_TEST_FLAGS ?= -race -count=1
E2E_TIMEOUT ?= 20m

.PHONY: all deps apt-deps tools generate check-generated build lint vet test unit e2e bench demo image check-image clean

all: build

apt-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi; \
	fi
	@mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true

tools: bin/.tools-$(BUF_VERSION)-$(PROTOC_GEN_GO_VERSION)-$(PROTOC_GEN_GRPC_VERSION)-$(GOLANGCI_VERSION)-$(GRPCURL_VERSION)

bin/.tools-%:
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GRPC_VERSION)
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	rm -f bin/.tools-* && touch $@

deps: apt-deps tools

# generate rebuilds every generated file (protobuf, bpf2go).
generate: deps
	buf lint
	buf generate
	go generate ./bpf/...

# check-generated fails when regenerating changes anything committed.
check-generated: generate
	@if [ -n "$$(git status --porcelain -- proto bpf)" ]; then \
	  echo "generated code is stale; run 'make generate' and commit:"; git status --porcelain -- proto bpf; git diff --stat -- proto bpf; exit 1; fi

build: deps
	go build -o bin/dpd ./cmd/dpd
	go build -o bin/dpdctl ./cmd/dpdctl
	go build -o bin/dpd-bench ./cmd/dpd-bench

vet:
	go vet ./...

lint: deps vet
	golangci-lint run ./...

# -p 1: privileged tests in different packages create cali* interfaces and
# start dataplanes that fail-closed every cali* interface they see, so
# packages must not run at the same time.
unit: deps
	go test $(GO_TEST_FLAGS) -p 1 -timeout 30m $$(go list ./... | grep -v /test/e2e)

e2e: build
	go test $(GO_TEST_FLAGS) -p 1 -timeout $(E2E_TIMEOUT) ./test/e2e/...

# test is the README's test command and what CI runs (.ci/run).
test: deps check-generated lint build check-image unit e2e

# bench measures dpd's required figures at node scale against the real
# daemon (as root): dpd-bench starts bin/dpd, drives it, measures real
# traffic between pods (P7; its nftables cases need nft, in APT_PACKAGES),
# runs the P4/P5 go benchmarks here, and writes every figure of this one
# run, with the kernel costs dpd measured, to BENCHMARKS.md. The daemon
# phases run again with /sys/kernel/rcu_expedited switched (put back
# after), so one run covers a kernel where TCX attach is slow and one
# where it is cheap.
bench: build
	bin/dpd-bench --full --src . --out BENCHMARKS.md --dpd-log bin/bench-dpd.log

demo: build
	./examples/demo.sh

# image builds the container image without a container engine: a static
# dpd (version and commit stamped in, see dpd --version) on an empty base,
# assembled by ./deploy/image into $(IMAGE_TAR), an OCI layout that is also
# a docker-archive (ctr -n k8s.io images import, podman load, docker load),
# tagged $(IMAGE), the name deploy/'s manifests use.
# Reproducible: every timestamp is the last commit's.
VERSION           ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT            ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE             ?= dpd:dev
IMAGE_TAR         ?= bin/dpd-image.tar
image:
	CGO_ENABLED=0 go build -trimpath -buildvcs=false \
	  -ldflags "-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o bin/image/dpd ./cmd/dpd
	go run ./deploy/image --binary bin/image/dpd --tag $(IMAGE) --version $(VERSION) --revision $(COMMIT) \
	  --created $(SOURCE_DATE_EPOCH) --out $(IMAGE_TAR)

# check-image builds the image as an operator would and checks that the
# tarball is an OCI layout holding a dpd that reports this build.
check-image: image
	@bin/image/dpd --version | grep -qF "$(VERSION)" || { echo "bin/image/dpd --version does not name $(VERSION)"; exit 1; }
	@tar -tf $(IMAGE_TAR) | grep -qx 'index.json' || { echo "$(IMAGE_TAR) is not an OCI layout (no index.json)"; exit 1; }
	@echo "image $(IMAGE) in $(IMAGE_TAR): $$(bin/image/dpd --version)"

clean:
	rm -rf bin
