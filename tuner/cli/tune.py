"""`tune.py` tuning a layer (--layer, --shape), several (--layers, --all) or a network's (--onnx, --torchvision):
its flags checked, then the layers tuned one after another on this GPU (or one process per GPU with --gpus),
the run's events drawn as they come and the regression table at the end."""
from __future__ import annotations

import argparse
import dataclasses
import time
import uuid
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from tuner.build.nvcc import nvcc_version
from tuner.cli.choices import positive
from tuner.core.layers import matching_layers
from tuner.cli.list_layers import print_layers
from tuner.cli.network_args import imported_network
from tuner.cli.tuning_view import TuningView, regression_table, run_summary
from tuner.core.device import missing_gpu
from tuner.core.epilogue import EpilogueError, parse_epilogue
from tuner.core.errors import UsageError
from tuner.core.problem import pair_text
from tuner.core.dtypes import dtype_fields
from tuner.core.layers import Layer, find_layer, load_layers, parse_shape
from tuner.core.yamlfile import brief
from tuner.families import registry
from tuner.families.base import SearchSpace
from tuner.importers.network import write_layers
from tuner.measure.evaluate import NoGpu
from tuner.pipeline import nightly
from tuner.pipeline.tuning import TuningOptions, TuningSession
from tuner.search.space import chosen_spaces
from tuner.store.journal import MIN_GRACE_S, check_storage_url
from tuner.store.results import check_results_dir

SCRIPT = Path(__file__).resolve().parents[2] / "tune.py"
EXIT_ENVIRONMENT = 1  # a layer that no candidate passed; also the toolchain or the GPU missing
EXIT_REGRESSION = 3
MAX_TIMEOUT_S = 86400.0


def shape_layer(text: str, epilogue_text: str | None = None, dtype: str | None = None) -> Layer:
    problem = parse_shape(text, dtype_fields(dtype or "f16"))
    if epilogue_text is not None:
        try:
            problem = dataclasses.replace(problem, epilogue=parse_epilogue(epilogue_text))
        except EpilogueError as error:
            raise UsageError(f"--epilogue: {error}") from None
    groups = f"g{problem.groups}" if problem.groups != 1 else ""
    name = (f"shape_{problem.n}x{problem.h}x{problem.w}x{problem.c}_k{problem.k}_{problem.r}x{problem.s}"
            f"_p{pair_text(problem.pads)}s{pair_text(problem.strides)}d{pair_text(problem.dilations)}{groups}"
            f"{'_' + problem.transposed_key if problem.transposed else ''}"
            f"{problem.epilogue.short}{problem.epilogue.beta_tag}" + (f"_{dtype}" if dtype not in (None, "f16") else ""))
    return Layer(name, problem)


def resolve_targets(args: argparse.Namespace, layers: dict[str, Layer]) -> list[Layer]:
    if args.epilogue is not None and not args.shape:
        raise UsageError("--epilogue goes with --shape; a layer of the table takes an 'epilogue:' field instead")
    if args.layer:
        return [find_layer(layers, args.layer)]
    if args.layers:
        names = [n.strip() for n in args.layers.split(",") if n.strip()]
        if not names:
            raise UsageError("--layers needs at least one layer name")
        return list({layer.name: layer for name in names for layer in matching_layers(layers, name)}.values())
    if args.all:
        return list(layers.values())
    if args.shape:
        return [shape_layer(args.shape, args.epilogue, args.dtype)]
    raise UsageError("say what to tune: --layer NAME, --layers A,B, --all, --shape N,H,W,C,K,R,S, or --list-layers")


def check_layers_runnable(targets: list[Layer], spaces: tuple[SearchSpace, ...], explicit: bool) -> None:
    """Before any GPU work: a layer that none of the families can run (whatever the GPU) is refused
    with each family's reason. A family the GPU cannot run is found once the GPU is known."""
    for layer in targets:
        reasons = [(space.family, registry.get(space.family).problem_reason(layer.problem)) for space in spaces]
        if all(reason for _, reason in reasons):
            said = "; ".join(f"{family}: {reason}" for family, reason in reasons)
            hint = " (or leave out --family to try every family)" if explicit else ""
            if layer.problem.epilogue.fused:
                fusing = [name for name, family in registry.families().items()
                          if set(layer.problem.epilogue.parts) <= family.fusable]
                hint += f"; families that fuse {layer.problem.epilogue.key}: {', '.join(fusing) or 'none'}"
            raise UsageError(f"layer {layer.name}: no kernel family can run it: {said}{hint}")


def options_from(args: argparse.Namespace, run_id: str | None) -> TuningOptions:
    for name in ("trials", "top", "confirm_rounds", "ncu_top"):
        positive("--" + name.replace("_", "-"), getattr(args, name))
    if args.jobs is not None:
        positive("--jobs", args.jobs)
    if args.prior < 0:
        raise UsageError(f"--prior must be 0 or more, got {args.prior}")
    if not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed must be from 0 to {2**32 - 1}, got {brief(args.seed)}")
    if not MIN_GRACE_S <= args.stale_after <= MAX_TIMEOUT_S:
        raise UsageError(f"--stale-after must be from {MIN_GRACE_S} to {MAX_TIMEOUT_S:.0f} seconds, got {args.stale_after}")
    if args.storage is not None:
        check_storage_url(args.storage)
    if args.gpus is not None:
        try:
            nightly.parse_gpus(args.gpus)
        except ValueError as error:
            raise UsageError(str(error)) from None
    check_results_dir(args.results_dir)
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # also refuses nan and inf, which the worker's waits cannot take
        raise UsageError(f"--timeout must be more than 0 and at most {MAX_TIMEOUT_S:.0f} seconds (a day), "
                         f"got {args.timeout}")
    return TuningOptions(trials=args.trials, top=args.top, confirm_rounds=args.confirm_rounds, ncu_top=args.ncu_top,
                         no_ncu=args.no_ncu, seed=args.seed, storage=args.storage, results_dir=args.results_dir,
                         cache_dir=args.cache_dir, jobs=args.jobs, timeout_s=args.timeout, run_id=run_id,
                         prior=args.prior, stale_after_s=args.stale_after,
                         skip_tuned_problems=args.onnx is not None or args.torchvision is not None,
                         prefer_superseding=not args.family)


def tune(args: argparse.Namespace, argv: list[str], console: Console) -> int:
    network = imported_network(args)
    if network is not None:
        layers = network.as_layers()
        if args.write_layers is not None:
            write_layers(network, args.write_layers)
            console.print(f"wrote {escape(str(args.write_layers))}: {len(network.layers)} layers, "
                          f"{len(network.unsupported)} convolutions not tuned")
            return 0
        if not (args.layer or args.layers or args.all or args.shape or args.list_layers):
            args.all = True
    elif args.batch is not None or args.write_layers is not None:
        raise UsageError("--batch and --write-layers go with --onnx MODEL or --torchvision NAME")
    else:
        layers = load_layers(args.layers_file)
    if args.dtype is not None and not (network is not None or args.shape):
        raise UsageError("--dtype goes with --shape, --onnx or --torchvision; a layer of the table takes "
                         "'input_type:', 'filter_type:' and 'output_type:' fields instead")
    if args.json or args.csv:
        if not args.list_layers:
            raise UsageError("--json and --csv go with --list-layers (and the report, bench, predict and diagnose commands)")
    if args.list_layers:
        print_layers(console, layers, network, "json" if args.json else "csv" if args.csv else "table")
        return 0
    if network is not None and network.unsupported:
        for item in network.unsupported:
            console.print(f"[yellow]not tuned: {escape(item.node)}: {escape(item.reason)}[/]")
    targets = resolve_targets(args, layers)
    spaces = chosen_spaces(args.family, args.space_file)
    check_layers_runnable(targets, spaces, explicit=bool(args.family))
    many = len(targets) > 1 or args.all or args.layers
    # Several layers: one id per UTC day, so a killed nightly resumes. Several GPUs on one layer:
    # one fresh id that all their workers share, so they split --trials between them.
    run_id = args.run_id or (nightly.default_run_id() if many else
                             f"gpus-{uuid.uuid4().hex[:12]}" if args.gpus else None)
    options = options_from(args, run_id)
    nvcc_version()  # fail before the GPU is touched if there is no compiler
    if args.gpus is not None:
        try:
            gpus = nightly.parse_gpus(args.gpus)
        except ValueError as error:
            raise UsageError(str(error)) from None
        if (why := missing_gpu()) is not None:  # said once here, not once by each GPU's process
            raise NoGpu(why)
        return nightly.run_on_gpus(argv, gpus, run_id, SCRIPT)
    started = time.monotonic()
    with TuningView(console) as view:
        session = TuningSession.on_this_gpu(options, spaces, view)
        try:
            outcomes = [session.tune_layer(layer) for layer in targets]
            session.build_chained([o.layer for o in outcomes if o.kernel is not None])
        finally:
            session.close()
    console.print(regression_table(outcomes))
    console.print(run_summary(outcomes, time.monotonic() - started))
    if any(o.runtime_us is None for o in outcomes):
        return EXIT_ENVIRONMENT
    if args.fail_on_regression and nightly.regressions(outcomes):
        return EXIT_REGRESSION
    return 0
