// sessionmem-plugin: written by `sessionmem install --agent opencode`; `sessionmem uninstall --agent opencode` removes it.
//
// OpenCode's events, sent to sessionmem's hook entry as the hook contract's stages (the same process the other
// agents' hooks run: `<python> -S <entry.py> <Stage> opencode`, the payload as JSON on stdin, the agent's output
// as JSON on stdout), and the memory it hands back put where OpenCode's model reads it:
//
// - session.created: SessionStart; its additionalContext goes into the session's system prompt
//   (experimental.chat.system.transform), every request of the session.
// - chat.message: UserPromptSubmit (the prompt's text); memory recalled for it joins the system prompt.
// - tool.execute.after: PostToolUse (OpenCode's tool, its arguments, its output, a command's exit code); past
//   work on the file it touched is appended to the tool's output, which the model reads next. A tool that
//   fails with an error fires no tool.execute.after: its part's update (status "error") is sent instead,
//   with that error.
// - session.idle: Stop, with the turn's last prompt and reply.
// - experimental.session.compacting: PreCompact, with the same; session.compacted: SessionStart with
//   source "compact", whose context (the checkpoint first) replaces the session's.
// - session.deleted: SessionEnd.
//
// Error handling: fail open. Nothing here throws into OpenCode; a hook that fails, prints nothing or takes
// longer than its budget (then killed) gives nothing back, and OpenCode carries on.
import { spawn } from "node:child_process";

const PYTHON = __SESSIONMEM_PYTHON__;
const ENTRY = __SESSIONMEM_ENTRY__;
const AGENT = "opencode";
// The hook's own deadline is shorter (it ends itself); these only bound a hook that hangs.
const BUDGET_MS = { SessionStart: 20000 };
const DEFAULT_BUDGET_MS = 8000;

function runHook(stage, payload) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(PYTHON, ["-S", ENTRY, stage, AGENT], { stdio: ["pipe", "pipe", "ignore"] });
    } catch (_) {
      resolve(null);
      return;
    }
    const chunks = [];
    const timer = setTimeout(() => { try { child.kill("SIGKILL"); } catch (_) { /* gone */ } }, BUDGET_MS[stage] ?? DEFAULT_BUDGET_MS);
    child.stdout.on("data", (chunk) => chunks.push(chunk));
    child.on("error", () => { clearTimeout(timer); resolve(null); });
    child.on("close", () => {
      clearTimeout(timer);
      try {
        const text = Buffer.concat(chunks).toString("utf8").trim();
        resolve(text ? JSON.parse(text) : null);
      } catch (_) {
        resolve(null);
      }
    });
    child.stdin.on("error", () => {});
    try {
      child.stdin.end(JSON.stringify({ ...payload, hook_event_name: stage }));
    } catch (_) { /* the close handler resolves */ }
  });
}

function contextOf(output) {
  const context = output?.hookSpecificOutput?.additionalContext;
  return typeof context === "string" ? context : "";
}

function textOf(parts) {
  return (parts ?? []).filter((part) => part?.type === "text" && !part.synthetic && typeof part.text === "string")
    .map((part) => part.text).join("\n");
}

export const SessionmemPlugin = async ({ directory }) => {
  const folders = new Map(); // session id -> the folder it works in (one OpenCode server can serve several)
  const cwdOf = (sessionID) => folders.get(sessionID) ?? directory;
  const memory = new Map(); // session id -> Promise of the SessionStart context
  const recalled = new Map(); // session id -> memory recalled for the latest prompt
  const lastPrompt = new Map();
  const lastReply = new Map();
  const replyMessages = new Set(); // ids of the assistant's messages, whose text parts are its reply

  const start = (sessionID, source) => {
    const context = runHook("SessionStart", { session_id: sessionID, cwd: cwdOf(sessionID), source })
      .then(contextOf);
    memory.set(sessionID, context);
    return context;
  };
  const turn = (sessionID) => ({
    session_id: sessionID, cwd: cwdOf(sessionID),
    last_user_message: lastPrompt.get(sessionID) ?? "", last_assistant_message: lastReply.get(sessionID) ?? "",
  });

  return {
    event: async ({ event }) => {
      try {
        const props = event?.properties ?? {};
        const sessionID = props.sessionID ?? props.info?.id;
        if (event.type.startsWith("session.") && sessionID && typeof props.info?.directory === "string") {
          folders.set(sessionID, props.info.directory);
        }
        if (event.type === "session.created" && sessionID && !memory.has(sessionID) && !props.info?.parentID) {
          start(sessionID, "startup");
        } else if (event.type === "message.updated" && props.info?.role === "assistant") {
          replyMessages.add(props.info.id);
        } else if (event.type === "message.part.updated" && props.part?.type === "text"
                   && replyMessages.has(props.part.messageID) && props.part.text) {
          lastReply.set(props.part.sessionID, props.part.text);
        } else if (event.type === "message.part.updated" && props.part?.type === "tool"
                   && props.part.state?.status === "error") {
          const part = props.part;
          await runHook("PostToolUse", {
            session_id: part.sessionID, cwd: cwdOf(part.sessionID), tool_name: part.tool,
            tool_input: part.state.input ?? {}, tool_response: "", tool_use_id: part.callID,
            error: typeof part.state.error === "string" ? part.state.error : "failed",
          });
        } else if (event.type === "session.idle" && sessionID && lastPrompt.has(sessionID)) {
          await runHook("Stop", turn(sessionID));
        } else if (event.type === "session.compacted" && sessionID) {
          start(sessionID, "compact");
        } else if (event.type === "session.deleted" && sessionID) {
          memory.delete(sessionID);
          recalled.delete(sessionID);
          await runHook("SessionEnd", { session_id: sessionID, cwd: cwdOf(sessionID), reason: "deleted" });
          folders.delete(sessionID);
        }
      } catch (_) { /* fail open */ }
    },
    "chat.message": async (input, output) => {
      try {
        const prompt = textOf(output?.parts);
        if (!prompt || !input?.sessionID) return;
        lastPrompt.set(input.sessionID, prompt);
        await memory.get(input.sessionID); // the worker SessionStart starts, up before the prompt is sent
        const answer = await runHook("UserPromptSubmit", { session_id: input.sessionID, cwd: cwdOf(input.sessionID),
                                                           prompt });
        recalled.set(input.sessionID, contextOf(answer));
      } catch (_) { /* fail open */ }
    },
    "experimental.chat.system.transform": async (input, output) => {
      try {
        const sessionID = input?.sessionID;
        if (!sessionID || !Array.isArray(output?.system)) return;
        const context = await (memory.get(sessionID) ?? start(sessionID, "startup"));
        if (context) output.system.push(context);
        const recall = recalled.get(sessionID);
        if (recall) output.system.push(recall);
      } catch (_) { /* fail open */ }
    },
    "tool.execute.after": async (input, output) => {
      try {
        const exit = output?.metadata?.exit;
        const answer = await runHook("PostToolUse", {
          session_id: input.sessionID, cwd: cwdOf(input.sessionID), tool_name: input.tool, tool_input: input.args ?? {},
          tool_response: typeof output?.output === "string" ? output.output : "", tool_use_id: input.callID,
          ...(typeof exit === "number" ? { exit_code: exit } : {}),
        });
        const context = contextOf(answer);
        if (context && typeof output?.output === "string") output.output += `\n\n${context}`;
      } catch (_) { /* fail open */ }
    },
    "experimental.session.compacting": async (input) => {
      try {
        if (input?.sessionID) await runHook("PreCompact", { ...turn(input.sessionID), trigger: "auto" });
      } catch (_) { /* fail open */ }
    },
  };
};
