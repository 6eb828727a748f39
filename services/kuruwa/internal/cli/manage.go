package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/allox-os/allox/services/kuruwa/internal/wire"
)

func printInstances(c *Context, ins []wire.InstanceInfo) {
	for _, in := range ins {
		state := "valid"
		if !in.Valid {
			state = "invalid"
		}
		session := ""
		if in.Session != "" {
			session = "\tsession=" + in.Agent + "/" + in.Session
		}
		fmt.Fprintf(c.Stdout, "%s\t%s\tdefinition=%s\towner=%s\t%s\tterminals=%d%s\n", in.Name, in.ID, in.Definition, in.Owner, state, in.Terminals, session)
	}
}

func instanceStart(_ context.Context, c *Context, inv *invocation) error {
	if len(inv.pos) != 1 {
		return usagef("instance start needs one definition name: kuruwa instance start DEFINITION [--name N] [--agent A --session S]")
	}
	var info wire.InstanceInfo
	if err := c.call(inv, "instance.start", wire.InstanceArgs{Definition: inv.pos[0], Name: inv.one("name"), Agent: inv.one("agent"), Session: inv.one("session")}, &info); err != nil {
		return err
	}
	printInstances(c, []wire.InstanceInfo{info})
	return nil
}

func instanceLs(ctx context.Context, c *Context, inv *invocation) error {
	var res wire.LsResult
	if err := c.call(inv, "ls", nil, &res); err != nil {
		return err
	}
	if inv.has("json") {
		return json.NewEncoder(c.Stdout).Encode(res.Instances)
	}
	printInstances(c, res.Instances)
	return nil
}

func tenantAdd(_ context.Context, c *Context, inv *invocation) error {
	if len(inv.pos) != 1 {
		return usagef("tenant add needs one name")
	}
	var info wire.TenantInfo
	if err := c.call(inv, "tenant.add", wire.TenantArgs{Name: inv.pos[0]}, &info); err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "%s\t%s\n", info.Name, info.Entry)
	return nil
}

func tenantRm(_ context.Context, c *Context, inv *invocation) error {
	if len(inv.pos) != 1 {
		return usagef("tenant rm needs one name")
	}
	return c.call(inv, "tenant.rm", wire.TenantArgs{Name: inv.pos[0]}, nil)
}

func tenantLs(_ context.Context, c *Context, inv *invocation) error {
	var ts []wire.TenantInfo
	if err := c.call(inv, "tenants", nil, &ts); err != nil {
		return err
	}
	if inv.has("json") {
		return json.NewEncoder(c.Stdout).Encode(ts)
	}
	for _, t := range ts {
		fmt.Fprintf(c.Stdout, "%s\t%s\tdefinitions=%s\tinstances=%s\tterminals=%s\tconnections=%d\n", t.Name, t.Entry,
			strings.Join(t.Definitions, ","), strings.Join(t.Instances, ","), strings.Join(t.Terminals, ","), len(t.Connections))
	}
	return nil
}

func grantVerb(op string) func(context.Context, *Context, *invocation) error {
	return func(_ context.Context, c *Context, inv *invocation) error {
		if len(inv.pos) != 1 {
			return usagef("%s needs a tenant: kuruwa %s TENANT --terminal NAME", op, op)
		}
		return c.call(inv, op, wire.GrantArgs{Tenant: inv.pos[0], Definition: inv.one("definition"), Instance: inv.one("instance"), Terminal: inv.one("terminal")}, nil)
	}
}
