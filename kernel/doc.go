// Package kernel builds and proves the Allox guest kernel.
//
// The kernel is described by a pinned source tarball, a base configuration (allnoconfig by default,
// as Kata's builder uses), topic fragments under fragments/ and a patch series under patches/.
// After olddefconfig every symbol a fragment requests must hold its requested value in the final
// .config ("the requested config must be final"); a failure names the symbol, the fragment line that
// asked for it, the value it got and the Kconfig dependency that was not met. An allow-list with a
// reason on every line is the only escape.
//
// A spec may also hold the kernel to Kata Containers' own guest kernel (Spec.Parity): kata/ holds
// the list of symbols Kata's fragments request for a release and architecture (written by
// cmd/kata-fragments from a Kata checkout), and every one must have Kata's value in the final
// config or a line of its own in the parity allow-list, "CONFIG_X category: reason". A claim that a
// symbol is absent from our Linux is checked against the source's Kconfig, and a line that no
// longer applies fails the proof.
//
// Builds are cached outside the checkout, keyed by the source hash, the final config, the patches
// and the toolchain, so an unchanged kernel is never rebuilt.
package kernel
