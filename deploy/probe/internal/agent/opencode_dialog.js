// Allox's dialog for opencode's tool calls (installed by the Probe's opencode adapter with
// --approval-mode dialog): before each tool call, ask `allox dialog hook opencode`, which asks the
// session's dialog and prints {"decision":"allow"|"deny","reason":...}; anything but allow fails
// the call with the reason, so the tool never runs.
import { spawn } from "node:child_process"

const HOOK = __HOOK__

function ask(request) {
  return new Promise((resolve) => {
    let out = ""
    const p = spawn(HOOK[0], HOOK.slice(1), { stdio: ["pipe", "pipe", "ignore"] })
    p.on("error", (e) => resolve({ decision: "deny", reason: "allox dialog hook: " + e.message }))
    p.stdout.on("data", (d) => { out += d })
    p.on("close", (code) => {
      try {
        resolve(JSON.parse(out))
      } catch {
        resolve({ decision: "deny", reason: "allox dialog hook exited " + code + " without a decision" })
      }
    })
    p.stdin.on("error", () => {})
    p.stdin.end(JSON.stringify(request))
  })
}

export const AlloxDialog = async () => ({
  "tool.execute.before": async (input, output) => {
    const a = await ask({ tool: input.tool, sessionID: input.sessionID, callID: input.callID, args: output.args })
    if (a.decision !== "allow") throw new Error("denied through the Allox dialog: " + (a.reason || a.decision))
  },
})
