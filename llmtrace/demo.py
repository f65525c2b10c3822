"""``llmtrace demo``: the support-agent scenario on the bundled backend, its three complaints reproduced,
traced into one store, diagnosed — and the commands to explore it printed at the end.

    llmtrace demo                 # the bundled SmolLM2-135M, writes ./llmtrace.duckdb
    llmtrace demo --model tiny    # the random test model: fast, for tests
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# complaint -> (symptom, the stages that explain it)
COMPLAINTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "The first token is slow since the last deploy": ("slow_first_token", ("cache.prefix_match", "intake.system_prompt")),
    "The same ticket gets a different answer each time": ("different_answer", ("gen.sampling", "forward.batching")),
    "In long chats the agent forgets the order number": ("session_forgets", ("loop.compaction",)),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default="llmtrace.duckdb", help="store to write (default ./llmtrace.duckdb)")
    parser.add_argument("--model", default=None,
                        help="GGUF path, or 'tiny' for the random test model (default: the bundled SmolLM2-135M)")
    parser.add_argument("--keep", action="store_true",
                        help="add to an existing store instead of moving it aside")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON at the end")


@dataclass
class DemoResult:
    db: Path
    passes: int = 0
    seconds: float = 0.0
    findings: list[Any] = field(default_factory=list)
    by_complaint: dict[str, Any] = field(default_factory=dict)  # complaint -> best Finding or None
    answers: dict[str, str] = field(default_factory=dict)


def _prepare_store(db: Path, keep: bool) -> str | None:
    if keep or not db.exists():
        return None
    aside = db.with_name(db.name + ".before-demo")
    db.replace(aside)
    wal = db.with_name(db.name + ".wal")
    if wal.exists():
        wal.replace(aside.with_name(aside.name + ".wal"))
    return str(aside)


def run_demo(db: Path, model: str | None, console: Any, keep: bool = False) -> DemoResult:
    import openai
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    import llmtrace
    from llmtrace.adapters import instrument
    from llmtrace.demo_scenario import TICKETS, SupportAgent
    from llmtrace.demo_server import InProcessServer

    t0 = time.perf_counter()
    moved = _prepare_store(db, keep)
    if moved:
        console.print(f"[dim]An earlier store was moved aside to {moved}.[/]")
    result = DemoResult(db=db)
    # The random test model only spreads its samples at a high temperature; real models at the usual 0.8.
    temperature = 5.0 if model == "tiny" else 0.8
    steps = [("Loading the model", 1), ("Deploy v1: tickets, tools in parallel and in sequence", 4),
             ("Complaint 2: the same ticket, asked three times", 3), ("Complaint 3: a long session, compacted", 1),
             ("Deploy v2: the clock moves to the top of the system prompt", 4), ("Diagnosing", 1)]
    server = None
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        tasks = [progress.add_task(name, total=n, start=False) for name, n in steps]

        def begin(i: int) -> None:
            progress.start_task(tasks[i])

        def done(i: int, n: int = 1) -> None:
            progress.advance(tasks[i], n)

        begin(0)
        server = InProcessServer(model).start()
        done(0)
        try:
            provider = llmtrace.init(db=db, service_name="support-agent", deploy="v1", capture="full")
            client = instrument(openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0))
            agent = SupportAgent(client, server.model_id, temperature=0.0, answer_tokens=40 if model != "tiny" else 16,
                                 tracer=provider.get_tracer("support-agent"))
            begin(1)
            result.answers["parallel"] = agent.handle_parallel(TICKETS[0])
            done(1)
            result.answers["sequential"] = agent.handle_sequential(TICKETS[1])
            done(1)
            agent.handle_parallel(TICKETS[2])
            done(1)
            agent.handle_sequential(TICKETS[3])
            done(1)
            begin(2)
            for i in range(3):
                result.answers[f"again {i + 1}"] = agent.answer_again(TICKETS[0], temperature)
                done(2)
            begin(3)
            answer, lost = agent.long_session(TICKETS[0], trigger_tokens=120)
            result.answers["long session"] = answer
            done(3)
            llmtrace.shutdown()
            provider = llmtrace.init(db=db, service_name="support-agent", deploy="v2", capture="full")
            agent.tracer = provider.get_tracer("support-agent")
            agent.clock = True
            begin(4)
            for ticket in TICKETS:
                agent.handle_parallel(ticket)
                done(4)
            llmtrace.shutdown()
        finally:
            llmtrace.shutdown()
            server.stop()
        begin(5)
        result.findings = diagnose(db)
        done(5)
    result.by_complaint = best_by_complaint(result.findings)
    result.passes = count_passes(db)
    result.seconds = time.perf_counter() - t0
    return result


def diagnose(db: Path) -> list[Any]:
    from llmtrace.analyzers import run_analyzers
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        return run_analyzers(conn)


def count_passes(db: Path) -> int:
    from llmtrace.tracer.storage.store import read_connection

    with read_connection(db) as conn:
        row = conn.execute("SELECT count(*) FROM requests WHERE side = 'client'").fetchone()
    return int(row[0]) if row else 0


def best_by_complaint(findings: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for complaint, (symptom, _) in COMPLAINTS.items():
        out[complaint] = next((f for f in findings if f.symptom == symptom), None)
    return out


def next_steps(db: Path) -> list[tuple[str, str]]:
    d = shlex.quote(str(db))
    return [
        (f"llmtrace explore {d}", "browse requests, the stage waterfall and the findings"),
        (f"llmtrace sql --db {d} \"SELECT deploy, count(*) AS passes, round(avg(hit_ratio), 2) AS hit_ratio, "
         "round(median(ttft_ms)) AS ttft_ms FROM requests WHERE side = 'server' GROUP BY deploy ORDER BY deploy\"",
         "hit ratio and TTFT by deploy"),
        (f"llmtrace check --db {d} --deploy v2 --baseline-deploy v1 --ttft", "the CI gate: fails on the v2 regression"),
        (f"llmtrace diagnose --db {d} --search \"first token is slow\"", "one complaint at a time"),
    ]


def report(result: DemoResult, console: Any) -> None:
    from rich.table import Table

    from llmtrace.analyzers.core.render import print_findings

    answer = " ".join((result.answers.get("parallel") or "").split())
    if answer:
        console.print(f"\n[dim]The agent's streamed answer to ticket C-1042:[/] {answer[:240]}")
    console.print()
    console.rule("[bold]What llmtrace found")
    print_findings(result.findings[:6], console)
    table = Table(title="The three complaints", show_lines=False, header_style="bold")
    table.add_column("complaint")
    table.add_column("stage named")
    table.add_column("because")
    for complaint, f in result.by_complaint.items():
        table.add_row(complaint, f.stage if f else "[red]not found[/]", f.title if f else "")
    console.print(table)
    console.print(f"{result.passes} traced calls in {result.seconds:.0f} s, stored in [bold]{result.db}[/].")
    console.rule("[bold]Explore it")
    for cmd, why in next_steps(result.db):
        console.print(f"  [bold cyan]{cmd}[/]", soft_wrap=True)  # one line, so it copies as typed
        console.print(f"      [dim]{why}[/]")


def run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from llmtrace.tracer.storage.store import StoreError

    console = Console(stderr=args.json)
    db = Path(args.db)
    if not db.parent.exists():
        print(f"llmtrace demo: directory {db.parent} does not exist", file=sys.stderr)
        return 2
    try:
        result = run_demo(db, args.model, console, keep=args.keep)
    except (StoreError, SystemExit) as exc:
        print(f"llmtrace demo: {exc}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json.dumps({"db": str(db), "passes": result.passes, "seconds": round(result.seconds, 1),
                                     "complaints": {c: (f.to_dict() if f else None) for c, f in result.by_complaint.items()},
                                     "findings": [f.to_dict() for f in result.findings]}, indent=2) + "\n")
    else:
        report(result, console)
    return 0 if all(result.by_complaint.values()) else 1
