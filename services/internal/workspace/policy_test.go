package workspace

import "testing"

func TestPolicy(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled("a", "s") {
		t.Fatal("turn checkpoints must default to off (the seed: once enabled)")
	}
	if err := p.SetAgent("a", false); err != nil {
		t.Fatal(err)
	}
	if err := p.SetSession("a", "keep", true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetAgent("c", true); err != nil {
		t.Fatal(err)
	}
	reopened, err := OpenPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		agent, session string
		want           bool
	}{{"a", "s", false}, {"a", "keep", true}, {"b", "s", false}, {"c", "s", true}} {
		if got := reopened.Enabled(tc.agent, tc.session); got != tc.want {
			t.Errorf("Enabled(%s, %s) = %v after restart, want %v", tc.agent, tc.session, got, tc.want)
		}
	}
	reopened.SetDefault(true)
	for _, tc := range []struct {
		agent, session string
		want           bool
	}{{"a", "s", false}, {"b", "s", true}, {"c", "s", true}} {
		if got := reopened.Enabled(tc.agent, tc.session); got != tc.want {
			t.Errorf("with the daemon default on: Enabled(%s, %s) = %v, want %v", tc.agent, tc.session, got, tc.want)
		}
	}
	if err := reopened.ForgetSession("a", "keep"); err != nil {
		t.Fatal(err)
	}
	if reopened.Enabled("a", "keep") {
		t.Error("a forgotten session must fall back to its agent's setting (off)")
	}
	if err := reopened.ClearAgent("a"); err != nil {
		t.Fatal(err)
	}
	if !reopened.Enabled("a", "s") {
		t.Error("an agent whose setting is cleared must follow the daemon default (on)")
	}
}

// An agent's shared/ mode is kept outside the workspace: it survives a reopen and goes with the agent.
func TestPolicySharedWritable(t *testing.T) {
	dir := t.TempDir()
	p, err := OpenPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	on := true
	if err := p.SetAgentOptions("w", &on, true); err != nil {
		t.Fatal(err)
	}
	if err := p.SetAgentOptions("r", nil, false); err != nil {
		t.Fatal(err)
	}
	p, err = OpenPolicy(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !p.SharedWritable("w") || p.SharedWritable("r") || !p.Enabled("w", "x") || p.Enabled("r", "x") {
		t.Errorf("after reopen: shared w %v r %v, turns w %v r %v; want true false true false",
			p.SharedWritable("w"), p.SharedWritable("r"), p.Enabled("w", "x"), p.Enabled("r", "x"))
	}
	if err := p.ForgetAgent("w"); err != nil {
		t.Fatal(err)
	}
	if p.SharedWritable("w") {
		t.Error("a deleted agent's shared mode is kept: a new agent of the same name would inherit rw")
	}
}
