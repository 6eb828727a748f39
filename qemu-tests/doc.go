// Package qemutests boots the built appliance (the artifacts mkimage writes, see
// internal/artifact) under QEMU and drives it from the outside, as a user would: through the
// serial console markers (internal/marker) and the daemon's RPC over a forwarded 127.0.0.1 port.
// The package holds only tests and the boot benchmark:
//
//	go test ./qemu-tests/ -v -timeout 60m             # boot tests (artifacts from make image)
//	go test ./qemu-tests/ -run '^$' -bench . -benchtime 1x   # appliance vs Debian baseline
//
// ALLOX_OUT names the artifact directory (default ../out from here), ALLOX_TEST_ARTIFACTS keeps
// every console log, ALLOX_ACCEL forces kvm or tcg, ALLOX_CACHE holds the baseline kernel.
package qemutests
