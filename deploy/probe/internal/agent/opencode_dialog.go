package agent

import (
	_ "embed"
	"encoding/json"
	"strings"
)

// opencode has no permission hook it calls (its plugin API's "permission.ask" is declared but
// opencode 1.18.33 never triggers it); its plugins' "tool.execute.before" hook runs before every
// tool call, and a throw from it fails the call. With Task.Dialog the adapter installs
// opencodePlugin, which asks OpencodeHookCommand (on stdin: the tool, its session and call ids
// and its arguments as JSON) and lets the call run only on "allow".
//
//go:embed opencode_dialog.js
var opencodePluginJS string

// opencodePlugin is the plugin's source with OpencodeHookCommand in it.
func opencodePlugin() string {
	b, _ := json.Marshal(OpencodeHookCommand)
	return strings.Replace(opencodePluginJS, "__HOOK__", string(b), 1)
}

// OpencodeHookCommand is what opencodePlugin runs for each tool call; as with claude_code's hook,
// nobody answering denies (a one-shot `opencode run` has nobody at its terminal).
var OpencodeHookCommand = []string{"/run/allox/bin/allox", "dialog", "hook", "opencode", "--default", "deny", "--timeout", "300"}

// opencodeDialogArgv starts argv with opencodePlugin installed: opencode loads the plugins of its
// config directories ({plugin,plugins}/*.js in OPENCODE_CONFIG_DIR), and the sandbox has no such
// file, so a shell writes the plugin (from the run's environment, not its command line) into a
// fresh directory under $TMPDIR and execs opencode with OPENCODE_CONFIG_DIR pointing there.
func opencodeDialogArgv(argv []string) []string {
	const script = `d=$(mktemp -d "${TMPDIR:-/tmp}/allox-opencode.XXXXXX") && mkdir "$d/plugin" && ` +
		`printf '%s' "$ALLOX_OPENCODE_PLUGIN" > "$d/plugin/allox-dialog.js" && unset ALLOX_OPENCODE_PLUGIN && ` +
		`OPENCODE_CONFIG_DIR="$d" exec "$@"`
	return append([]string{"/bin/sh", "-c", script, "opencode"}, argv...)
}
