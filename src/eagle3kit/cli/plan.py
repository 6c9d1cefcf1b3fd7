"""CLI verb: `eagle3kit plan` -- will speculation pay, and what would it take?

The arithmetic lives in `eagle3kit.plan`; this module parses, calls `plan()`, and renders.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand

from eagle3kit.cli._options import JsonFlag
from eagle3kit.core import registry

if TYPE_CHECKING:
    from eagle3kit.plan import PlanResult

_LIST_OPTION = "--target-tps"


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def expand_list_option(args: list[str], option: str = _LIST_OPTION) -> list[str]:
    """Let `--target-tps 150 200` (and `150,200`) mean `--target-tps 150 --target-tps 200`.

    Numbers right after the option's value are more values of it (plan takes no positional
    arguments, so nothing else could claim them); `--` ends the rewriting.
    """
    out: list[str] = []
    i, n = 0, len(args)
    while i < n:
        a = args[i]
        if a == "--":
            out.extend(args[i:])
            break
        if a == option or a.startswith(option + "="):
            if a == option:
                if i + 1 >= n:
                    out.append(a)  # let Typer say the value is missing
                    break
                values, i = [args[i + 1]], i + 2
            else:
                values, i = [a.split("=", 1)[1]], i + 1
            while i < n and _is_number(args[i]):
                values.append(args[i])
                i += 1
            for v in values:
                for part in v.split(",") if "," in v else [v]:
                    out += [option, part.strip()]
            continue
        out.append(a)
        i += 1
    return out


class _PlanCommand(TyperCommand):
    """Typer's command, with the space-separated --target-tps list expanded before parsing."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, expand_list_option(list(args)))


_BASE, _CYCLE, _ACC = "Baseline (one of)", "Cycle (one of)", "Acceptance (one of)"

BaselineTps = Annotated[
    float | None,
    typer.Option(
        "--baseline-tps", help="Plain-decode throughput, tok/s (e.g. 82).", rich_help_panel=_BASE
    ),
]
DecodeMs = Annotated[
    float | None,
    typer.Option(
        "--decode-ms", help="Plain decode step, ms (tok/s = 1000 / ms).", rich_help_panel=_BASE
    ),
]
CycleMs = Annotated[
    float | None,
    typer.Option(
        "--cycle-ms",
        help="Whole speculative cycle (draft + verify), ms; depth then costs nothing.",
        rich_help_panel=_CYCLE,
    ),
]
DraftMs = Annotated[
    float | None,
    typer.Option(
        "--draft-ms",
        help="One draft step, ms; cycle(k) = k*draft + verify(k+1).",
        rich_help_panel=_CYCLE,
    ),
]
VerifyMs = Annotated[
    list[str] | None,
    typer.Option(
        "--verify-ms",
        help="Measured verify time of N tokens (repeat). Linear between points, along the last "
        "segment beyond; refused below the smallest N.",
        metavar="N:MS",
        rich_help_panel=_CYCLE,
    ),
]
VerifyFit = Annotated[
    str | None,
    typer.Option(
        "--verify-fit",
        help="Verify time = INTERCEPT + PER_TOKEN * n, ms.",
        metavar="INTERCEPT,PER_TOKEN",
        rich_help_panel=_CYCLE,
    ),
]
Acceptance = Annotated[
    float | None,
    typer.Option(
        "--acceptance",
        help="Constant per-step conditional acceptance, in [0, 1).",
        metavar="P",
        rich_help_panel=_ACC,
    ),
]
AcceptanceFile = Annotated[
    Path | None,
    typer.Option(
        "--acceptance-file",
        help="An eval, bench, bench-live, probe or probe-live JSON (its per-position "
        "acceptance, else its tau), or conditional rates: \\[p1, ...].",
        metavar="FILE.json",
        rich_help_panel=_ACC,
    ),
]
AcceptLen = Annotated[
    float | None,
    typer.Option(
        "--accept-len",
        help="Measured accept length (tokens per verify), >= 1.",
        metavar="TAU",
        rich_help_panel=_ACC,
    ),
]
Depth = Annotated[
    int | None,
    typer.Option(
        "--depth",
        help="Draft steps per cycle. Default: the file's length with --acceptance-file, else 3 "
        "(SGLang's usual --speculative-num-steps).",
        metavar="K",
    ),
]
MaxDepth = Annotated[
    int | None,
    typer.Option(
        "--max-depth",
        help="Best-depth search over 1..N (composed cycle only). Default max(10, depth).",
    ),
]
TargetTps = Annotated[
    list[float] | None,
    typer.Option(
        "--target-tps",
        help="Target tok/s; several: --target-tps 150 200 (or repeat the option).",
        metavar="TPS...",
    ),
]
Plot = Annotated[
    Path | None,
    typer.Option(
        "--plot", help="Write a PNG: throughput against accept length.", metavar="FILE.png"
    ),
]
NewTokens = Annotated[
    float | None,
    typer.Option(
        "--new-tokens",
        help="Request: tokens generated per request (with --prefill-ms: end-to-end tok/s).",
        metavar="N",
    ),
]
PrefillMs = Annotated[
    float | None,
    typer.Option(
        "--prefill-ms",
        help="Request: prefill time, ms (the prompt's forward; it emits the first token).",
        metavar="MS",
    ),
]
From = Annotated[
    Path | None,
    typer.Option(
        "--from",
        help="A measurement (eval, bench, bench --url, probe, probe --url --json): its accept "
        "length, depth, cycle and decode times, new tokens and prefill, as far as it has them "
        "(options given here win).",
        metavar="FILE.json",
    ),
]


ConcurrencyOpt = Annotated[
    int,
    typer.Option(
        "--concurrency",
        min=1,
        help="By context length (a --from file with by_length): the costs' concurrency level.",
    ),
]

_M = "Methods: which pays at which load (docs/plan.md)"
MethodOpt = Annotated[
    str | None,
    typer.Option(
        "--method",
        help=f"{', '.join(registry.names()[:-1])} or {registry.names()[-1]}: the drafting cost "
        "of the cycle (k, one or no drafter passes per cycle); with --costs, that method's "
        "rows only.",
        rich_help_panel=_M,
    ),
]
MethodsOpt = Annotated[
    str | None,
    typer.Option(
        "--methods",
        help="Compare these methods (comma-separated) from --costs/--live and --accept.",
        rich_help_panel=_M,
    ),
]
CostsOpt = Annotated[
    Path | None,
    typer.Option(
        "--costs",
        help="Measured costs per concurrency level: `bench --concurrency 1,4 --json` output.",
        metavar="FILE.json",
        rich_help_panel=_M,
    ),
]
AcceptOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--accept",
        help='A candidate\'s measured acceptance: an eval or bench JSON with "method" and '
        "per_position_acceptance; LABEL=FILE names it (repeat).",
        metavar="[LABEL=]FILE.json",
        rich_help_panel=_M,
    ),
]
LiveOpt = Annotated[
    Path | None,
    typer.Option(
        "--live",
        help="Costs and candidates from `bench --url ... --baseline-url ... --json`.",
        metavar="FILE.json",
        rich_help_panel=_M,
    ),
]
SuiteOpt = Annotated[
    str | None,
    typer.Option("--suite", help="With --live: one suite's figures.", rich_help_panel=_M),
]
ModelOpt = Annotated[
    str,
    typer.Option("--model", help="The target, in the launch lines.", rich_help_panel=_M),
]
ScheduleOpt = Annotated[
    Path | None,
    typer.Option(
        "--vllm-schedule",
        help="Write vLLM's --speculative-config with num_speculative_tokens_per_batch_size "
        "(the best k per measured level; 0 where plain decoding wins).",
        metavar="FILE.json",
        rich_help_panel=_M,
    ),
]
MaxBatch = Annotated[
    int,
    typer.Option(
        "--max-batch",
        help="vLLM's --max-num-seqs: the schedule's last range ends there.",
        rich_help_panel=_M,
    ),
]


@dataclass(frozen=True)
class PlanOptions:
    """`plan`'s options as given (None: not given), and the per-position rates a file adds."""

    baseline_tps: float | None = None
    decode_ms: float | None = None
    cycle_ms: float | None = None
    draft_ms: float | None = None
    verify_ms: list[str] | None = None
    verify_fit: str | None = None
    acceptance: float | None = None
    acceptance_file: Path | None = None
    tau: float | None = None  # --accept-len
    depth: int | None = None
    max_depth: int | None = None
    target_tps: tuple[float, ...] = ()
    new_tokens: float | None = None
    prefill_ms: float | None = None
    from_: Path | None = None
    per_position: tuple[float, ...] | None = None
    method: str | None = None


def plan(
    *,
    baseline_tps: BaselineTps = None,
    decode_ms: DecodeMs = None,
    cycle_ms: CycleMs = None,
    draft_ms: DraftMs = None,
    verify_ms: VerifyMs = None,
    verify_fit: VerifyFit = None,
    acceptance: Acceptance = None,
    acceptance_file: AcceptanceFile = None,
    tau: AcceptLen = None,
    depth: Depth = None,
    max_depth: MaxDepth = None,
    target_tps: TargetTps = None,
    plot: Plot = None,
    new_tokens: NewTokens = None,
    prefill_ms: PrefillMs = None,
    from_: From = None,
    method: MethodOpt = None,
    methods: MethodsOpt = None,
    costs: CostsOpt = None,
    accept: AcceptOpt = None,
    live: LiveOpt = None,
    suite: SuiteOpt = None,
    model: ModelOpt = "TARGET_MODEL",
    vllm_schedule: ScheduleOpt = None,
    max_batch: MaxBatch = 256,
    concurrency: ConcurrencyOpt = 1,
    json_: JsonFlag = False,
) -> None:
    """Will speculation pay, and what would it take? (cycle model -> speedup, break-even)

    tau = 1 + sum_i prod_{j<=i} p_j; throughput = tau / cycle; break-even tau =
    baseline_tps * cycle. Exit 0 when speculation at least matches the baseline, 1 when it
    is below break-even (throughput < baseline), 2 on bad input. With --methods (or --costs,
    --live): every method x depth x concurrency level from measured costs; exit 1 when plain
    decoding wins at every level.
    """
    if methods is not None or costs is not None or live is not None:
        from eagle3kit.cli.plan_methods import MethodsOptions, run

        names = [m.strip() for m in (methods or method or "").split(",") if m.strip()]
        opts = MethodsOptions(
            tuple(names),
            costs,
            tuple(accept or ()),
            live,
            suite,
            depth,
            model,
            vllm_schedule,
            max_batch,
        )
        if not run(opts, json_):
            raise typer.Exit(1)
        return
    result = _plan(
        PlanOptions(
            baseline_tps=baseline_tps,
            decode_ms=decode_ms,
            cycle_ms=cycle_ms,
            draft_ms=draft_ms,
            verify_ms=verify_ms,
            verify_fit=verify_fit,
            acceptance=acceptance,
            acceptance_file=acceptance_file,
            tau=tau,
            depth=depth,
            max_depth=max_depth,
            target_tps=tuple(target_tps or ()),
            new_tokens=new_tokens,
            prefill_ms=prefill_ms,
            from_=from_,
            method=method,
        )
    )
    from eagle3kit.cli._plan_lengths import by_length

    _show(result, plot, json_, by_length(from_, acceptance_file, concurrency, depth))
    if not result.pays:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command(cls=_PlanCommand)(plan)


def _plan(o: PlanOptions) -> PlanResult:
    """The options (and `--from`'s figures where the options give none) -> plan()."""
    from eagle3kit import plan as planmod

    if o.from_ is not None:
        from eagle3kit.plan.from_file import plan_args_from_file

        o = replace(o, **plan_args_from_file(o.from_, asdict(o)))
        if o.per_position is not None:
            o = replace(o, tau=None)  # the file's rates, which give its tau
    if o.acceptance_file is not None:
        o = _acceptance_file(o)
    verify, fit = o.verify_ms, o.verify_fit
    return planmod.plan(
        baseline_tps=o.baseline_tps,
        decode_ms=o.decode_ms,
        cycle_ms=o.cycle_ms,
        draft_ms=o.draft_ms,
        verify_ms=[planmod.parse_verify_point(v) for v in verify] if verify else None,
        verify_fit=planmod.parse_verify_fit(fit) if fit is not None else None,
        acceptance=o.acceptance,
        per_position=o.per_position,
        tau=o.tau,
        depth=o.depth,
        max_depth=o.max_depth,
        target_tps=o.target_tps,
        new_tokens=o.new_tokens,
        prefill_ms=o.prefill_ms,
        method=o.method,
    )


def _acceptance_file(o: PlanOptions) -> PlanOptions:
    """`--acceptance-file`: its per-position rates, or (a measurement without them) its tau."""
    from eagle3kit.core.errors import Eagle3Error
    from eagle3kit.plan.from_file import acceptance_from_file

    assert o.acceptance_file is not None
    given = (("--acceptance", o.acceptance), ("--accept-len", o.tau))
    other = [n for n, v in given if v is not None]
    if other:
        raise Eagle3Error(
            "--acceptance: expected exactly one of --acceptance P, --acceptance-file FILE, "
            f"--accept-len TAU, found --acceptance-file and {other[0]}"
        )
    return replace(o, **acceptance_from_file(o.acceptance_file, o.depth))


def _show(result: PlanResult, plot: Path | None, json_: bool, bl: dict | None) -> None:
    """The plan (and by context length, when the file had it): JSON or tables, and plots."""
    from eagle3kit.cli import _plan_lengths
    from eagle3kit.plan.plots import plot_plan

    written = plot_plan(result, plot) if plot is not None else None
    bl_plot = _plan_lengths.plot(bl, plot) if bl is not None and plot is not None else None
    if json_:
        from eagle3kit.cli._render import emit_json

        doc = result.to_json()
        if written is not None:
            doc["plot"] = str(written)
        if bl is not None:
            doc |= bl | ({"plot_by_length": str(bl_plot)} if bl_plot else {})
        emit_json(doc)
    else:
        _render(result, written)
        if bl is not None:
            _plan_lengths.render(bl)


def _pct(p: float | None) -> str:
    return "—" if p is None else f"{p:.1%}"


def _plan_table(r: PlanResult):
    """The Rich table of the plan at its depth."""
    from rich.table import Table

    k = r.depth
    t = Table(title=f"Speculation plan — {r.cycle_model}", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("baseline", f"{r.baseline_tps:.4g} tok/s ({1000 / r.baseline_tps:.3g} ms per decode)")
    t.add_row("cycle", f"{r.cycle_ms:.4g} ms at depth {k}")
    p_note = (
        "" if r.per_position_acceptance is None else " (constant equivalent of the file's rates)"
    )
    t.add_row("accept length τ", f"{r.tau:.4g}  (per-step p {_pct(r.per_step_acceptance)}{p_note})")
    t.add_row("throughput", f"{r.throughput_tps:.4g} tok/s = τ / cycle")
    if r.request is not None:
        q = r.request
        t.add_row(
            "per request",
            f"{q.tps:.4g} tok/s end to end: {q.new_tokens:.4g} tokens, "
            f"prefill {q.prefill_ms:.4g} ms + (N-1)/τ cycles",
        )
    verdict = "[green]pays[/]" if r.pays else "[red]below break-even[/]"
    t.add_row("speedup", f"{r.speedup:.3f}×  {verdict}")
    be_k = r.break_even_per_step_acceptance_at_depth
    t.add_row(
        "break-even τ",
        f"{r.break_even_tau:.4g} = baseline × cycle  (p "
        f"{_pct(be_k) if be_k is not None else f'unreachable at depth {k}'}"
        f" at depth {k}, {_pct(r.break_even_per_step_acceptance)} as k→∞)",
    )
    t.add_row("ideal (all accepted)", f"τ {k + 1} → {r.ideal_tps:.4g} tok/s")
    if r.best_depth is None:
        best = "— (cycle given whole: depth costs nothing here, so as deep as acceptance holds)"
    else:
        best = (
            f"{r.best_depth} → τ {r.best_depth_tau:.4g}, {r.best_depth_tps:.4g} tok/s "
            f"(searched 1..{r.max_depth})"
        )
    t.add_row("best depth", best)
    return t


def _targets_table(r: PlanResult):
    """The Rich table of what each target tok/s would take."""
    from rich.table import Table

    k = r.depth
    tt = Table(title="What would it take", title_justify="left")
    tt.add_column("target tok/s", justify="right")
    tt.add_column("τ needed", justify="right")
    tt.add_column(f"p at depth {k}", justify="right")
    tt.add_column("p as k→∞", justify="right")
    if r.depths:
        tt.add_column("easiest depth (p)", justify="right")
    for x in r.targets:
        at_k = (
            _pct(x.per_step_acceptance_at_depth)
            if x.reachable_at_depth
            else f"unreachable at depth {k}"
        )
        row = [f"{x.tps:g}", f"{x.tau:.3g}", at_k, _pct(x.per_step_acceptance)]
        if r.depths:
            row.append(
                "—"
                if x.easiest_depth is None
                else f"{x.easiest_depth} ({_pct(x.easiest_per_step_acceptance)})"
            )
        tt.add_row(*row)
    return tt


def _render(r: PlanResult, plot: Path | None) -> None:
    """Rich tables: the plan at the given depth, then each target."""
    from eagle3kit.cli._render import out

    console = out()
    console.print(_plan_table(r))
    if r.targets:
        console.print(_targets_table(r))
    if plot is not None:
        console.print(f"plot: {plot}")
    if not r.pays:
        console.print(
            f"[red]below break-even:[/] {r.throughput_tps:.4g} tok/s < {r.baseline_tps:.4g} tok/s "
            "baseline "
            f"(needs τ > {r.break_even_tau:.3g}); exit 1"
        )
