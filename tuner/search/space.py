"""Search spaces: each family's YAML file parsed by its family, and the joint space of one layer (every
family that can run it on this device) as the study samples it: a `family` parameter, then that
family's knobs under `<family>.<knob>` names, so that the families' knobs never share a name."""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tuner.core.device import DeviceFacts
from tuner.families import registry
from tuner.families.base import KernelConfig, SearchSpace, SpaceError
from tuner.core.problem import ConvProblem
from tuner.store.results import ResultsError
from tuner.store.schema import BestEntry
from tuner.core.errors import UsageError
from tuner.core.yamlfile import YamlFileError, read_yaml

REPO = Path(__file__).resolve().parents[2]
SPACES = REPO / "search_spaces"
FAMILY_PARAM = "family"
# Space files larger than this are not a search space; refuse before parsing them.
MAX_SPACE_BYTES = 1 << 20
# A space of at least this many configurations is checked in child processes, a slice of its first knob each: the
# static checks cost about 60 us a configuration in Python, and a TF32 1x1 layer's study spent 17-20 s setting up on
# the H100 host (16 cores), most of it checking its sm90_gemm space of 311 K. On this project's 2-vCPU CI host two
# children took 17.1 s where one process took 20.7 (sm90_gemm's 311 K) and 4.8 where it took 4.2 (sm80's 56 K): a
# child's start (1 s of imports) pays only for the large spaces.
PARALLEL_CHECK_CONFIGS = 100_000


def default_space_file(family: str) -> Path:
    return SPACES / f"{family}.yaml"


def landscape_space_file(family: str) -> Path:
    return SPACES / f"{family}_landscape.yaml"


def load_space(path: Path) -> SearchSpace:
    """A family's space file: its `family:` key names the family that parses the rest."""
    try:
        document = read_yaml(path, "search space", MAX_SPACE_BYTES)
    except YamlFileError as error:
        raise SpaceError(str(error)) from None
    if not isinstance(document, dict) or not isinstance(document.get(FAMILY_PARAM), str):
        raise SpaceError(f"search space {path} must be a mapping with a 'family:' key "
                         f"({', '.join(registry.names())})")
    return registry.get(document[FAMILY_PARAM]).rules.parse_space(document)


def make_config(problem: ConvProblem, family: str, params: dict) -> KernelConfig:
    return registry.get(family).rules.make_config(problem, params)


def entry_config(entry: BestEntry, layer: str, problem: ConvProblem) -> KernelConfig:
    """The configuration a best.yaml entry records; ResultsError when it cannot be read back."""
    try:
        return make_config(problem, entry.family, entry.knobs)
    except (KeyError, TypeError, ValueError, SpaceError) as error:
        raise ResultsError(f"best.yaml layer {layer!r}: unreadable kernel parameters ({error})") from None


def static_problems(config: KernelConfig, problem: ConvProblem, device: DeviceFacts) -> list[str]:
    return registry.family_of(config).rules.static_problems(config, problem, device)


def all_configs(space: SearchSpace, problem: ConvProblem) -> Iterator[KernelConfig]:
    family = registry.get(space.family)
    names = list(space.choices)
    for values in itertools.product(*space.choices.values()):
        yield family.rules.make_config(problem, dict(zip(names, values)))


def valid_configs(space: SearchSpace, problem: ConvProblem, device: DeviceFacts) -> list[KernelConfig]:
    return list(_valid_configs(space, problem, device))


@functools.lru_cache(maxsize=32)  # a layer's study asks twice (its space, the cost model's ranking): seconds each
def _valid_configs(space: SearchSpace, problem: ConvProblem, device: DeviceFacts) -> tuple[KernelConfig, ...]:
    family = registry.get(space.family)
    if registry.why_not(family, problem, device):
        return ()
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(cpus, len(space.choices_items[0][1]) if space.choices_items else 1)
    if space.size >= PARALLEL_CHECK_CONFIGS and workers > 1:
        try:
            return _checked_in_parallel(space, problem, device, workers)
        except (OSError, EOFError, pickle.UnpicklingError):
            pass  # a worker could not start or died: check them in this process
    return checked_configs(space, problem, device)


def checked_configs(space: SearchSpace, problem: ConvProblem, device: DeviceFacts) -> tuple[KernelConfig, ...]:
    """The space's configurations that pass the family's static checks, in the product's order, each once."""
    family = registry.get(space.family)
    # dict.fromkeys: knobs a problem does not use (sm90_dsl's tile_q in a GEMM) make one configuration twice
    return tuple(c for c in dict.fromkeys(all_configs(space, problem))
                 if not family.rules.static_problems(c, problem, device))


def _checked_in_parallel(space: SearchSpace, problem: ConvProblem, device: DeviceFacts,
                         workers: int) -> tuple[KernelConfig, ...]:
    """checked_configs' result, in its order: one slice of the space a value of its first knob (the product's outer
    loop), dealt to `workers` processes of tuner.search.check_slices (plain child processes: multiprocessing's would
    import the caller's main module again, and fork would copy the tuner's threads mid-lock)."""
    (first, values), rest = space.choices_items[0], space.choices_items[1:]
    slices = [SearchSpace(space.family, ((first, (value,)), *rest)) for value in values]
    dealt = [list(range(i, len(slices), workers)) for i in range(workers)]
    # a child's stderr is dropped: whatever stops one (an error in a check, Ctrl-C) the check here that follows meets
    # again and reports once
    children = [subprocess.Popen([sys.executable, "-m", "tuner.search.check_slices"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO) for _ in dealt]
    try:
        for child, indices in zip(children, dealt):
            child.stdin.write(pickle.dumps(([slices[i] for i in indices], problem, device)))
            child.stdin.close()
        parts: dict[int, tuple[KernelConfig, ...]] = {}
        for child, indices in zip(children, dealt):
            parts.update(zip(indices, pickle.loads(child.stdout.read())))
            if child.wait() != 0:
                raise OSError(f"tuner.search.check_slices exited {child.returncode}")
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return tuple(dict.fromkeys(c for i in range(len(slices)) for c in parts[i]))


@dataclass(frozen=True)
class JointSpace:
    """The spaces of the families a study searches together, in family-name order."""

    spaces: tuple[SearchSpace, ...]

    def __post_init__(self) -> None:
        if not self.spaces:
            raise SpaceError("a study needs at least one family's space")
        families = [s.family for s in self.spaces]
        if len(set(families)) != len(families):
            raise SpaceError(f"two search spaces for one family: {families}")

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(s.family for s in self.spaces)

    @property
    def key(self) -> str:
        """The study-name segment: which families' knobs the study holds."""
        return "families=" + "+".join(self.families)

    @property
    def digest(self) -> str:
        """8 hex digits over every family's knobs and their choices. Optuna fixes a categorical's
        choices for the life of a study, so a space whose choices changed needs a study of its own."""
        body = json.dumps([[s.family, [[knob, [str(v) for v in values]] for knob, values in s.choices_items]]
                           for s in self.spaces])
        return hashlib.sha256(body.encode()).hexdigest()[:8]

    def space(self, family: str) -> SearchSpace:
        for space in self.spaces:
            if space.family == family:
                return space
        raise SpaceError(f"family {family!r} is not in this study ({', '.join(self.families)})")

    @property
    def size(self) -> int:
        return sum(s.size for s in self.spaces)

    def contains(self, config: KernelConfig) -> bool:
        """Whether the study can ask for this configuration: its family and every knob's value are
        among the choices."""
        if config.family not in self.families:
            return False
        choices = self.space(config.family).choices
        return all(knob in choices and value in choices[knob] for knob, value in config.search_params.items())

    def held(self, family: str, params: dict) -> dict:
        """Stored parameters with their family's refined knobs at the choice this study holds them at (studied):
        a kernel refined after its study (refine.py) seeds another study as the configuration that one can ask for."""
        if family not in self.families:
            return params
        choices = self.space(family).choices
        return {**params, **{knob: choices[knob][0] for knob in registry.get(family).rules.refined_knobs
                             if knob in choices}}

    def only(self, families: tuple[str, ...]) -> "JointSpace":
        return JointSpace(tuple(s for s in self.spaces if s.family in families))


def joint_params(config: KernelConfig) -> dict:
    """A configuration's parameters as the study stores them."""
    family = config.family
    return {FAMILY_PARAM: family, **{f"{family}.{knob}": value for knob, value in config.search_params.items()}}


def split_params(params: dict) -> tuple[str, dict]:
    """(family, its knobs) from stored parameters."""
    if FAMILY_PARAM not in params:
        raise SpaceError(f"stored parameters {sorted(params)} name no family")
    family = str(params[FAMILY_PARAM])
    prefix = family + "."
    return family, {name[len(prefix):]: value for name, value in params.items() if name.startswith(prefix)}


def config_from_params(problem: ConvProblem, params: dict) -> KernelConfig:
    family, knobs = split_params(params)
    return make_config(problem, family, knobs)


def studied(space: SearchSpace) -> SearchSpace:
    """The space a study samples: its family's refined knobs held at their first choice (refine.py tries the others
    on the study's finalists)."""
    return space.holding(registry.get(space.family).rules.refined_knobs)


def layer_space(spaces: tuple[SearchSpace, ...], problem: ConvProblem, device: DeviceFacts) -> JointSpace:
    """The spaces of the families that can run this problem on this device, as a study samples them (studied). None
    can: a SpaceError that says why for each family."""
    runnable, reasons = [], []
    for space in spaces:
        reason = registry.why_not(registry.get(space.family), problem, device)
        if reason is None:
            runnable.append(studied(space))
        else:
            reasons.append(f"{space.family}: {reason}")
    if not runnable:
        raise SpaceError("no kernel family can run this layer here: " + "; ".join(reasons))
    return JointSpace(tuple(sorted(runnable, key=lambda s: s.family)))


def without_superseded(joint: JointSpace, problem: ConvProblem) -> tuple[JointSpace, tuple[str, ...]]:
    """The layer's joint space less the families another family of it supersedes on this problem
    (Family.supersedes), and those left out."""
    superseded = {name for family in joint.families
                  for name in registry.get(family).supersedes(problem)} & set(joint.families)
    if not superseded:
        return joint, ()
    return joint.only(tuple(f for f in joint.families if f not in superseded)), tuple(sorted(superseded))


def joint_valid_configs(joint: JointSpace, problem: ConvProblem, device: DeviceFacts) -> list[KernelConfig]:
    return [config for space in joint.spaces for config in valid_configs(space, problem, device)]


def chosen_spaces(family_text: str | None, space_files: list[Path] | None) -> tuple[SearchSpace, ...]:
    """The spaces to search: the named families (default every known one), each from its
    --space-file if one was given, else from search_spaces/<family>.yaml."""
    if family_text is not None:
        names = [name.strip() for name in family_text.split(",") if name.strip()]
        unknown = [name for name in names if name not in registry.names()]
        if unknown or not names:
            raise UsageError(f"--family {family_text!r}: unknown family {', '.join(unknown) or '(none given)'}; "
                             f"choose from {', '.join(registry.names())}")
        if len(set(names)) != len(names):
            raise UsageError(f"--family {family_text!r} names a family twice; name each once")
    else:
        names = list(registry.names())
    given = {}
    for path in space_files or []:
        space = load_space(path)
        if space.family in given:
            raise UsageError(f"--space-file: two files for family {space.family} ({given[space.family][0]} and {path})")
        given[space.family] = (path, space)
    stray = [family for family in given if family not in names]
    if stray:
        raise UsageError(f"--space-file for {', '.join(stray)}, which --family leaves out; add it to --family")
    return tuple(given[name][1] if name in given else load_space(default_space_file(name)) for name in names)
