// Package evidence is the on-disk evidence set of one managed execution
// observed by the system-effects observer, and its in-memory form.
//
// A set is one directory per run, outside every workspace
// (e.g. STATE/effects/<run_id>/):
//
//	header.json          protocol, ids, paths, scope, recovery parameters, capture times
//	A/<domain>.jsonl     one Snapshot per domain at each capture point:
//	B/<domain>.jsonl     A before the agent runs, B after its process tree is gone,
//	C/<domain>.jsonl     C (protocol 3) after the recovery
//	residue.jsonl        optional: the processes a managed run left in its frozen
//	                     group when its main process exited, before they were killed
//	history.jsonl        the history recorder's events
//	history.json         the recorder's History summary (events, drops)
//	faults.log           the observer's fault log: one line per fault; empty when none
//	manifest.json        sha256 and size of every file above; written last
//	report.json          v2 verifier report  } written by the verifiers,
//	recovery-report.json v3 verifier report  } outside the manifest
//
// Closing a set means writing manifest.json, atomically (temporary file,
// fsync, rename, directory fsync), after every other file: a set without a
// manifest is visibly unclosed. The manifest protects against partial and
// corrupted sets, not against a forger who can rewrite it too.
//
// A snapshot file is JSON Lines: its first line is the format, the
// snapshot's domain, point, notes and item count, then one [key,value] line
// per item.
//
// Byte strings are lossless (format 2): every key, value, note and
// exclusion, and every byte string of the history and the verifiers'
// reports (file names, symlink targets, process names, paths), is written
// in its jsonbytes form: a JSON string when it is valid UTF-8
// (["f","file …"]), else {"base64":"…"} in standard base64 with padding
// ([{"base64":"Zv4="},"file …"] for fþ). A string never equals an
// object, so two byte strings never share a form. header.json and each
// snapshot's first line carry "format":2; Load refuses a header of another
// format (ErrFormat), and decoding refuses a snapshot of another, rather
// than misread it. Sets written before format 2 (no format; invalid UTF-8
// written as U+FFFD) are not readable.
//
// Snapshots are canonical: items sorted by key, values rendered as fixed
// one-line strings, no ids that the kernel reassigns, no times; two captures
// of the same state are byte-identical.
package evidence
