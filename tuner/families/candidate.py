"""A configuration of a family for one problem, with its family looked up once: what the stages after the search
hand each other (finalists, confirmation, timing) where each would otherwise ask the registry again."""
from __future__ import annotations

from dataclasses import dataclass, field

from tuner.core.device import DeviceFacts
from tuner.core.problem import ConvProblem
from tuner.families import registry
from tuner.families.base import KernelConfig, LaunchArgs
from tuner.families.family import Family


@dataclass(frozen=True)
class Candidate:
    problem: ConvProblem
    config: KernelConfig
    family: Family = field(compare=False, repr=False)

    @classmethod
    def of(cls, config: KernelConfig, problem: ConvProblem) -> Candidate:
        return cls(problem, config, registry.family_of(config))

    @property
    def launch(self) -> LaunchArgs:
        """What the compiled kernel takes at run time besides its buffers."""
        return self.family.rules.launch_args(self.config, self.problem)

    def runs_on(self, device: DeviceFacts) -> bool:
        """Whether the family takes the layer and the GPU, and the configuration passes its static checks."""
        return (registry.why_not(self.family, self.problem, device) is None
                and not self.family.rules.static_problems(self.config, self.problem, device))
