# Allox OS: build, boot and test the Kata guest appliance. See README.md.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
OUT ?= out
# The kernel and the Debian userland are cached here by content hash, outside the checkout.
export ALLOX_CACHE ?= /var/cache/allox
TEST_TIMEOUT ?= 80m

.PHONY: all deps image boot test bench bench-kuruwa unit generate check-generated clean repro-check repro-kernel kata-fragments

all: image

deps:
	@ci/deps.sh

bin/mkimage: deps FORCE
	@$(GO) build -o bin/mkimage ./mkimage

# Build the default appliance (images/allox.hcl) into $(OUT)/, and the appliances the QEMU tests need,
# each the default one with one thing more: the eBPF process-tree provider ($(OUT)/process-tree/), a
# dm-verity root ($(OUT)/verity/), the system-effects observer ($(OUT)/system-effects/), python3
# for the session client's shims ($(OUT)/python/), the session-network plugin in proxy mode with
# python3 and ssh ($(OUT)/session-network/), the session-share plugin with its tools on
# and python3 ($(OUT)/session-share/), the monitor plugin with python3 ($(OUT)/monitor/), the dialog
# plugin ($(OUT)/dialog/), the kuruwa service with managed execution ($(OUT)/kuruwa/), the stand-in
# kata-agent ($(OUT)/kata-agent/, with bin/kata-agent-standin: not the real agent), and the agents'
# CLIs from the npm registry with the dialog plugin ($(OUT)/agents/). Their kernel is the same, so the later builds
# take it from the cache.
image: bin/mkimage
	bin/mkimage build -out $(OUT)
	bin/mkimage build -out $(OUT)/process-tree qemu-tests/testdata/process-tree.hcl
	bin/mkimage build -out $(OUT)/verity qemu-tests/testdata/verity.hcl
	bin/mkimage build -out $(OUT)/system-effects qemu-tests/testdata/system-effects.hcl
	bin/mkimage build -out $(OUT)/python qemu-tests/testdata/python.hcl
	bin/mkimage build -out $(OUT)/session-network qemu-tests/testdata/session-network.hcl
	bin/mkimage build -out $(OUT)/session-share qemu-tests/testdata/session-share.hcl
	bin/mkimage build -out $(OUT)/monitor qemu-tests/testdata/monitor.hcl
	bin/mkimage build -out $(OUT)/kuruwa qemu-tests/testdata/kuruwa.hcl
	bin/mkimage build -out $(OUT)/dialog qemu-tests/testdata/dialog.hcl
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags=-buildid= -o bin/kata-agent-standin ./qemu-tests/internal/standin/kata-agent
	bin/mkimage build -out $(OUT)/kata-agent qemu-tests/testdata/kata-agent.hcl
	bin/mkimage build -out $(OUT)/agents qemu-tests/testdata/agents.hcl

# Build the default appliance, boot it under QEMU (KVM when it works, TCG otherwise), wait until the
# workspace daemon is ready, ask it for system.info, and power it off cleanly.
boot: image
	$(GO) run ./qemu-tests/cmd/allox-boot -out $(OUT)

# Regenerate the committed bpf2go output (BPF C → .o and Go loader); needs clang and llvm.
generate: deps
	$(GO) generate ./services/internal/proctree/ ./services/internal/effects/history/ ./services/internal/netguard/

# Regenerate the list of symbols Kata's own x86_64 guest kernel requests (kernel/kata/), from a Kata
# checkout at the release the drop-ins model: make kata-fragments KATA=/path/to/kata-containers
KATA ?= $(error set KATA to the root of a Kata Containers checkout)
kata-fragments:
	$(GO) run ./kernel/cmd/kata-fragments -kata $(KATA) -arch x86_64 -o kernel/kata/kata-$$(cat $(KATA)/VERSION)-x86_64.conf

# CI regenerates and fails when the committed output differs from what the BPF C now compiles to.
check-generated: generate
	@git diff --exit-code -- services/internal/proctree/ services/internal/effects/history/ services/internal/netguard/ || { echo "bpf2go output is stale: run make generate and commit it" >&2; exit 1; }

# The whole suite: the reproducibility check, unit and integration tests on the real components, then
# the QEMU boots.
test: image check-generated repro-check
	$(GO) vet ./...
	ALLOX_OUT=$(abspath $(OUT)) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

# Unit tests only (no image, no QEMU): a quick loop while editing.
unit: deps
	$(GO) test -short ./...

# The parity rows compare with the appliance built without the Kata parity fragments
# ($(OUT)/no-kata-parity/); its kernel comes from the cache after the first run. CI never builds it.
bench: image
	bin/mkimage build -out $(OUT)/no-kata-parity qemu-tests/testdata/no-kata-parity.hcl
	ALLOX_OUT=$(abspath $(OUT)) $(GO) run ./ci/bench -out $(abspath $(OUT)) -before-parity $(abspath $(OUT))/no-kata-parity
	ALLOX_OUT=$(abspath $(OUT)) $(GO) test -run '^$$' -bench . -benchtime 10x -timeout 90m ./qemu-tests/
	STORE_BENCH_FILES=1000,10000,100000 $(GO) test -run '^$$' -bench 'Checkpoint|Rollback' -benchtime 200x -timeout 60m ./services/internal/store/
	STORE_BENCH_FILES=1000,10000,100000 $(GO) test -run '^$$' -bench 'QuotaCost|SharedIndex' -benchtime 1x -timeout 60m ./services/internal/store/
	$(GO) test -run '^$$' -bench . -benchtime 300x ./services/internal/tracked/
	$(GO) test -run '^$$' -bench . -benchtime 200x ./services/workspace-daemon/
	$(GO) test -run '^$$' -bench SpawnStorm -benchtime 5x ./services/internal/proctree/
	$(GO) test -run '^$$' -bench Proxy -benchtime 1x ./services/internal/netbroker/
	$(GO) test -run '^$$' -bench OTLPIngest -benchtime 300x ./services/internal/monitor/
	$(GO) test -run '^$$' -bench 'Share/(cp|read-100|write)' -benchtime 5x ./services/internal/sessionshare/
	$(GO) test -run '^$$' -bench 'Share/read-4KiB' -benchtime 2000x ./services/internal/sessionshare/
	$(GO) test -run '^$$' -bench Overhead -benchtime 10x ./services/internal/effects/lifecycle/
	$(GO) test -run '^$$' -bench Overhead -benchtime 8x ./services/internal/effects/history/
	$(GO) test -run '^$$' -bench SSH -benchtime 1x ./deploy/probe/internal/sshremote/
	$(GO) test -run '^$$' -bench 'Intents|LossToFence|GatewayHeap' -benchtime 1x -timeout 20m ./deploy/probe/
	$(MAKE) bench-kuruwa

# Kuruwa against Debian's tmux, CLI round trips, p50/p99 over 200 samples; needs no image. Then a
# full output ring's write beside a plain copy of the same bytes.
bench-kuruwa:
	$(GO) test -run '^$$' -bench KuruwaVersusTmux -benchtime 200x ./services/kuruwa/internal/daemon/
	$(GO) test -run '^$$' -bench RingWriteFull ./internal/term/

# Bit-for-bit reproducibility: build the default appliance twice, each with a fresh cache (a fresh
# Debian userland; only the kernel is shared), and compare every artifact (mkimage diff names the first
# differing cpio entry, ext4 file, ELF section or line). About 20 s on a warm kernel cache.
repro-check: bin/mkimage
	ci/repro-check.sh

# The kernel's turn: compile it afresh in a scratch cache and compare bzImage, vmlinux and the config
# with the cached build of the same key. About 18 minutes of both cores.
repro-kernel: bin/mkimage
	ci/repro-kernel.sh

clean:
	rm -rf $(OUT) bin

FORCE:
