package agent

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// opencode with Task.Dialog: its argv, run by a real /bin/sh, writes the plugin with the hook's
// command into a fresh config directory, takes it off the environment, and execs the CLI with
// OPENCODE_CONFIG_DIR there. Without Dialog the argv is the CLI's own and there is no plugin.
func TestOpencodeDialogPlugin(t *testing.T) {
	task := Task{Prompt: "the task", ModelURL: "http://10.0.2.100:8080", APIKey: "k", Dialog: true}
	// The CLI stood in for by a shell that prints its plugin, its environment and its arguments.
	const show = `cat "$OPENCODE_CONFIG_DIR/plugin/allox-dialog.js"; echo; echo "plugin-env=[$ALLOX_OPENCODE_PLUGIN]"; echo "args=$*"`
	argv := opencode.Argv("/bin/sh", task)
	if i := slices.Index(argv, "/bin/sh"); i < 0 || argv[len(argv)-1] != "the task" {
		t.Fatalf("argv %q", argv)
	}
	argv = slices.Insert(argv, slices.Index(argv[1:], "/bin/sh")+2, "-c", show, "opencode")
	cmd := exec.Command(argv[0], argv[1:]...)
	tmp := t.TempDir()
	cmd.Env = []string{"TMPDIR=" + tmp, "PATH=" + os.Getenv("PATH")}
	env := opencode.Env(task)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	hook, _ := json.Marshal(OpencodeHookCommand)
	s := string(out)
	for _, want := range []string{`"tool.execute.before"`, "const HOOK = " + string(hook), "plugin-env=[]", "args=run -m allox/scripted the task"} {
		if !strings.Contains(s, want) {
			t.Errorf("the CLI's start has no %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "__HOOK__") {
		t.Error("the plugin's hook command was not filled in")
	}
	if d, _ := os.ReadDir(tmp); len(d) != 1 || !strings.HasPrefix(d[0].Name(), "allox-opencode.") {
		t.Errorf("config directories under TMPDIR: %v, want one allox-opencode.*", d)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(env["OPENCODE_CONFIG_CONTENT"]), &cfg); err != nil || cfg["provider"] == nil {
		t.Errorf("OPENCODE_CONFIG_CONTENT %q (%v)", env["OPENCODE_CONFIG_CONTENT"], err)
	}

	task.Dialog = false
	if a := opencode.Argv("/usr/bin/opencode", task); a[0] != "/usr/bin/opencode" {
		t.Errorf("without dialog: argv %q, want the CLI itself", a)
	}
	if _, ok := opencode.Env(task)["ALLOX_OPENCODE_PLUGIN"]; ok {
		t.Error("without dialog: a plugin in the environment")
	}
}
