"""Silent weight corruption in place, inside vLLM's workers (the ``corrupt_weights`` fault).

Run on every worker through the executor's ``collective_rpc`` (a module-level
function, so it reaches a worker process by reference), between two engine
steps. The server keeps answering 200; only the answers change.

vLLM's CPU backend prepacks every linear layer's weight at load time (oneDNN
or its own packed GEMM) and may drop the original, so writing a linear's
``weight`` changes nothing there. The token embedding table and the
normalisation weights are used as they are on every backend, so the modes
act on those, in the language model only (a vision tower is left alone):

- ``zero``: the token embedding table zeroed: every hidden state is zero,
  every logit equal, and greedy decoding answers token 0 over and over
  (vLLM's ``!!!!!!!!`` of weights lost on wake-up);
- ``nan``: the token embedding table set to NaN, which reaches every logit (a
  faulty GPU, a bad weight update);
- ``layers``: the decoder layers' normalisation weights blown up (x50, the
  same whether a model scales by ``w`` or by ``1 + w``): the layers drown the
  residual stream and the model answers other tokens, fluent-looking
  nonsense on a real model.

The originals are kept in this process and written back by :func:`restore`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

MODES = ("zero", "layers", "nan")
_saved: dict[str, Any] = {}


def _model(worker: Any) -> Any:
    runner = getattr(worker, "model_runner", None)
    getter = getattr(runner, "get_model", None)
    if callable(getter):
        return getter()
    return getattr(runner, "model", None)


def _language(model: Any) -> Iterator[tuple[str, Any]]:
    """The language model's parameters (a vision tower or projector is left out)."""
    for name, parameter in model.named_parameters():
        if "vision" in name or "projector" in name or parameter.numel() == 0:
            continue
        yield name, parameter


def corrupt(worker: Any, params: Mapping[str, Any]) -> list[str]:
    """Corrupt this worker's model in place as ``params["mode"]`` says; return what changed."""
    import torch  # type: ignore[import-not-found]

    restore(worker)
    model = _model(worker)
    if model is None:
        return []
    mode = str(params.get("mode", "zero"))
    if mode == "layers":
        chosen = [
            (n, p) for n, p in _language(model) if "layers." in n and "norm" in n and p.ndim == 1
        ]
    else:
        chosen = [(n, p) for n, p in _language(model) if "embed_tokens" in n][:1]
    changed = []
    with torch.no_grad():
        for name, parameter in chosen:
            _saved[name] = (parameter, parameter.detach().clone())
            if mode == "layers":
                parameter.fill_(50.0)
            else:
                parameter.fill_(float("nan") if mode == "nan" else 0.0)
            changed.append(name)
    return changed


def restore(worker: Any) -> list[str]:
    """Write back every weight :func:`corrupt` changed in this process."""
    import torch

    restored = []
    with torch.no_grad():
        for name, (parameter, original) in list(_saved.items()):
            parameter.copy_(original)
            restored.append(name)
    _saved.clear()
    return restored
