"""What a layer does to the convolution's accumulators before the one store, as networks run it:
y = act(scale[k] * conv + bias[k] + beta * residual), each part optional. Part of the problem (the study
key, best.yaml, the export), applied by the kernel's epilogue and by the float64 reference alike."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from tuner.core.arrays import array_module
from tuner.core.yamlfile import brief

# The text form: parts joined by '+', in this order, e.g. "scale+bias+residual+relu"; "none" for none.
# A residual scale other than 1 is written "residual*0.5".
NONE = "none"


class EpilogueError(ValueError):
    """An epilogue text or mapping that does not describe one."""


class Activation(enum.Enum):
    none = "none"
    relu = "relu"
    gelu = "gelu"   # the exact (erf) form, as torch.nn.GELU() computes it
    silu = "silu"

    def __lt__(self, other: "Activation") -> bool:  # configs holding an epilogue sort
        return self.value < other.value


@dataclass(frozen=True, order=True)
class Epilogue:
    scale: bool = False          # per output channel, f32 (a folded batch-norm's gamma / sqrt(var + eps))
    bias: bool = False           # per output channel, f32
    residual: bool = False       # a tensor of the output's shape and type, NHWC
    residual_scale: float = 1.0  # beta, applied to the residual
    activation: Activation = Activation.none

    def __post_init__(self) -> None:
        if not math.isfinite(self.residual_scale):
            raise EpilogueError(f"residual scale {self.residual_scale} must be a finite number")
        if not self.residual and self.residual_scale != 1.0:
            raise EpilogueError("a residual scale needs a residual: write residual*SCALE")

    @property
    def fused(self) -> bool:
        """Anything beyond the bare convolution."""
        return self != Epilogue()

    @property
    def parts(self) -> tuple[str, ...]:
        """The parts present, as the text form names them ('residual' without its scale)."""
        named = [name for name in ("scale", "bias", "residual") if getattr(self, name)]
        if self.activation is not Activation.none:
            named.append(self.activation.value)
        return tuple(named)

    @property
    def key(self) -> str:
        """'scale+bias+residual+relu', 'residual*0.5', or 'none': the text form, also the study-key segment."""
        if not self.fused:
            return NONE
        words = []
        for part in self.parts:
            if part == "residual" and self.residual_scale != 1.0:
                part = f"residual*{self.beta_text}"
            words.append(part)
        return "+".join(words)

    @property
    def beta_text(self) -> str:
        """The residual scale exactly (repr round-trips a float; %g made 0.1234567 and 0.123457 one key),
        without a trailing '.0': '0.5', '2', '0.1234567'."""
        text = repr(float(self.residual_scale))
        return text[:-2] if text.endswith(".0") else text

    @property
    def beta_tag(self) -> str:
        """The residual scale in a layer name: '' for 1, else '_beta0p5'-like (identifier characters
        only, exact as beta_text is)."""
        if not self.residual or self.residual_scale == 1.0:
            return ""
        return "_beta" + self.beta_text.replace(".", "p").replace("-", "m").replace("+", "")

    @property
    def canonical(self) -> "Epilogue":
        """The canonical fused form, the one key every import path gives a layer (docs/torch.md): the scale
        folded into the filter (scale[k] * conv(x, w) = conv(x, scale[k] * w)), so that a conv + BatchNorm
        (scale+bias) and the same conv exported with its BatchNorm folded (bias) are one problem."""
        return Epilogue(False, self.bias, self.residual, self.residual_scale, self.activation)

    @property
    def short(self) -> str:
        """The kernel-name suffix: '_esbrrelu'-like, only characters a C++ identifier takes."""
        if not self.fused:
            return ""
        letters = "".join(letter for letter, on in (("s", self.scale), ("b", self.bias), ("r", self.residual)) if on)
        return f"_e{letters}{self.activation.value if self.activation is not Activation.none else ''}"


def parse_epilogue(text: object) -> Epilogue:
    """'none', or parts joined by '+' (or ','): scale, bias, residual[*SCALE], and one of relu, gelu, silu."""
    if not isinstance(text, str) or not text.strip():
        raise EpilogueError(f"epilogue {brief(text)} must be text such as 'scale+bias+relu' or 'none'")
    if len(text) > 200:
        raise EpilogueError(f"epilogue {brief(text)} is too long to be one")
    words = [w.strip().lower() for w in text.replace(",", "+").split("+")]
    if words == [NONE]:
        return Epilogue()
    fields: dict = {}
    for word in words:
        name, _, factor = word.partition("*")
        if name in ("scale", "bias", "residual") and (not factor or name == "residual"):
            if name in fields:
                raise EpilogueError(f"epilogue {text!r} names {name} twice")
            fields[name] = True
            if factor:
                try:
                    fields["residual_scale"] = float(factor)
                except ValueError:
                    raise EpilogueError(f"epilogue {text!r}: residual scale {factor!r} is not a number") from None
        elif word in {a.value for a in Activation} - {Activation.none.value}:
            if "activation" in fields:
                raise EpilogueError(f"epilogue {text!r} names two activations")
            fields["activation"] = Activation(word)
        else:
            raise EpilogueError(f"epilogue {text!r}: unknown part {word!r}; parts are scale, bias, residual[*BETA] "
                                f"and one of relu, gelu, silu (or 'none')")
    return Epilogue(**fields)


# --- the reference: float64, NumPy or CuPy alike ------------------------------------------------------

def apply_epilogue(conv64, epilogue: Epilogue, scale=None, bias=None, residual=None):
    """The epilogue on a float64 convolution result [N,P,Q,K], with the operands the kernel got."""
    xm = array_module(conv64)
    out = conv64
    if epilogue.scale:
        out = out * scale.astype(xm.float64)
    if epilogue.bias:
        out = out + bias.astype(xm.float64)
    if epilogue.residual:
        out = out + epilogue.residual_scale * residual.astype(xm.float64)
    if epilogue.activation is Activation.relu:
        out = xm.maximum(out, 0.0)
    elif epilogue.activation is Activation.silu:
        out = out / (1.0 + xm.exp(-out))
    elif epilogue.activation is Activation.gelu:
        out = 0.5 * out * (1.0 + _erf(out / math.sqrt(2.0), xm))
    return out


def _erf(values, xm):
    if xm.__name__ == "cupy":
        import cupyx.scipy.special

        return cupyx.scipy.special.erf(values)
    return xm.vectorize(math.erf, otypes=[xm.float64])(values) if values.size else values
