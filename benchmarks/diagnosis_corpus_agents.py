"""Cases of the diagnosis corpus in agents that pass ``tools=`` with a small ``max_tokens``, so every tool call
the model starts is cut at the cap: a container-yard agent whose own next steps never carry the cut calls
(stuck on one lookup, or fanning out over independent containers), and a berth planner that writes the cut
call back into the conversation and carries on (the twin: the same calls with room to finish).
"""

from __future__ import annotations

from typing import Any

from diagnosis_corpus_common import Ctx

YARD = ("You are the yard assistant of the Tarrow Point container terminal. Look a container up before you say "
        "where it is, quote its gate-in time only from the lookup, never promise a vessel slot, and tell hauliers "
        "with reefer boxes to book a power plug. Answer in one short paragraph. ") * 2
YARD_FUNCS = [("container_status", "Where one container is in the yard, with its gate-in time and holds."),
              ("customs_hold", "Whether customs has a hold on one container, and why.")]
YARD_TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": {
    "type": "object", "properties": {"container": {"type": "string"}}, "required": ["container"]}}}
    for n, d in YARD_FUNCS]
YARD_TOOLS_ANTHROPIC = [{"name": n, "description": d, "input_schema": {
    "type": "object", "properties": {"container": {"type": "string"}}, "required": ["container"]}}
    for n, d in YARD_FUNCS]
# ISO 6346 container numbers (owner code, serial, check digit): another id kind than the claims desk's C-n
BOXES = ["MSCU4410273", "TGHU8801526", "CMAU3057718", "HLXU2290461", "OOLU6183340", "SEGU9925107",
         "TCNU1148832", "MRKU7710265", "GESU5519934", "FCIU3306678", "BMOU4472019", "TEMU8064413"]


def _stuck_or_fan_out(c: Ctx, twin: bool, model_call: Any) -> None:
    """Planted: for each haulier the agent asks the model (with the tools, cut at six tokens), ignores what came
    back and runs the same container lookup again, five times. Twin: one agent turn per haulier that fans out
    over six containers at once in one session, each asked once and never sent back, then a summary."""
    import llmtrace
    from llmtrace.adapters.helpers import loops

    for run in range(3 if not twin else 2):
        if twin:
            with llmtrace.session(f"haulier-{run}"), loops.agent("yard"):
                loops.fan_out(BOXES[6 * run:6 * run + 6],
                              lambda box: model_call([{"role": "user", "content": f"Where is {box} right now?"}]),
                              max_workers=3)
                model_call([{"role": "user", "content": "Sum up the six boxes for the haulier."}])
            continue
        box = BOXES[run]
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"Booking BK{7301 + run}: can my driver collect "
                                                                  f"{box} this afternoon?"}]
        for step in range(5):
            model_call(msgs)
            msgs = msgs + _tool_turn(model_call.api, f"yd{run}s{step}", "container_status", {"container": box},
                                     "Stack B14, tier 3; gate-in 06:12; no holds.")
        model_call(msgs)


def _tool_turn(api: str, cid: str, name: str, args: dict[str, str], result: str) -> list[dict[str, Any]]:
    """The app's own tool call and its result, written into the conversation as each API wants it."""
    import json

    if api == "openai":
        return [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
                {"role": "tool", "tool_call_id": cid, "content": result}]
    return [{"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": name, "input": args}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": result}]}]


class _OpenAIYard:
    api = "openai"

    def __init__(self, c: Ctx) -> None:
        self.c = c

    def __call__(self, msgs: list[dict[str, Any]]) -> Any:
        return self.c.ask([{"role": "system", "content": YARD}, *msgs], max_tokens=6, tools=YARD_TOOLS,
                          tool_choice="required")


class _AnthropicYard:
    """Streamed, tool choice left to the model (a cut call or cut text, the cap is the same)."""

    api = "anthropic"

    def __init__(self, c: Ctx) -> None:
        self.c = c

    def __call__(self, msgs: list[dict[str, Any]]) -> str:
        with self.c.anthropic.messages.stream(model=self.c.model, max_tokens=6, system=YARD, messages=msgs,
                                              tools=YARD_TOOLS_ANTHROPIC, extra_body={"temperature": 0}) as st:
            return "".join(st.text_stream)


def cut_tools_stuck_vs_fan_out(c: Ctx, twin: bool) -> None:
    _stuck_or_fan_out(c, twin, _OpenAIYard(c))


def cut_tools_stuck_vs_fan_out_anthropic(c: Ctx, twin: bool) -> None:
    _stuck_or_fan_out(c, twin, _AnthropicYard(c))


# ── a cut tool call written back: the app goes on with it ──────────────────────────────────────
BERTH = ("You plan berths at the Tarrow Point terminal. Call the berth tool for every vessel the pilot names, "
         "then confirm the berth and the window in one sentence. Never move a vessel that is already alongside. ") * 2
TERMINALS = ["north quay", "south quay", "east basin", "ro-ro ramp"]
BERTH_PARAMS = {"type": "object", "properties": {
    "terminal": {"type": "string", "enum": TERMINALS},
    "window": {"type": "string", "enum": ["dawn", "morning", "afternoon", "night"]}},
    "required": ["terminal", "window"], "additionalProperties": False}
BERTH_TOOLS = [{"type": "function", "function": {"name": "assign_berth", "description":
                "Reserve a berth for a vessel in one tide window.", "parameters": BERTH_PARAMS}}]
BERTH_TOOLS_ANTHROPIC = [{"name": "assign_berth", "description": "Reserve a berth for a vessel in one tide window.",
                          "input_schema": BERTH_PARAMS}]
# IMO ship numbers: seven digits after the prefix
VESSELS = ["IMO 9321483", "IMO 9456017", "IMO 9707998", "IMO 9231652"]


def cut_berth_call_carried_on(c: Ctx, twin: bool) -> None:
    """OpenAI: a tool call is required; the planted cap (6 tokens) cuts it mid-JSON and the app writes whatever
    came back in as the assistant's turn and asks for the next step (finish reason unread). The twin's cap
    (48) lets each call finish; the app writes the call and a tool result back, the same turns otherwise."""
    cap = 48 if twin else 6
    for k, vessel in enumerate(VESSELS):
        msgs: list[dict[str, Any]] = [{"role": "system", "content": BERTH},
                                      {"role": "user", "content": f"Pilot here: {vessel} arrives on the next tide."}]
        for step in range(2):
            r = c.ask(msgs, max_tokens=cap, tools=BERTH_TOOLS, tool_choice="required")
            said = r.choices[0].message.model_dump(exclude_none=True)
            msgs = [*msgs, said]
            for call in said.get("tool_calls") or []:
                msgs.append({"role": "tool", "tool_call_id": call["id"], "content": f"Reserved ({k}.{step})."})
            msgs.append({"role": "user", "content": "Good. What is the next step for the mooring gang?"})
        c.ask(msgs, max_tokens=cap, tools=BERTH_TOOLS, tool_choice="required")


def cut_berth_call_carried_on_anthropic(c: Ctx, twin: bool) -> None:
    """The same through Anthropic's Messages API (tool choice "any"): the content blocks written back as the SDK
    gave them (a cut call arrives as its partial text), a tool_result after each finished tool_use."""
    cap = 48 if twin else 6
    for k, vessel in enumerate(VESSELS):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"{vessel} is due at dawn, which berth?"}]
        for step in range(2):
            r = c.anthropic.messages.create(model=c.model, max_tokens=cap, system=BERTH, messages=msgs,
                                            tools=BERTH_TOOLS_ANTHROPIC, tool_choice={"type": "any"})
            blocks = [b.model_dump(exclude_none=True) for b in r.content]
            msgs = [*msgs, {"role": "assistant", "content": blocks}]
            results = [{"type": "tool_result", "tool_use_id": b["id"], "content": f"Reserved ({k}.{step})."}
                       for b in blocks if b.get("type") == "tool_use"]
            msgs.append({"role": "user", "content": [*results, {"type": "text", "text": "And the tug after that?"}]})
        c.anthropic.messages.create(model=c.model, max_tokens=cap, system=BERTH, messages=msgs,
                                    tools=BERTH_TOOLS_ANTHROPIC, tool_choice={"type": "any"})
