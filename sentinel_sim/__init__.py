"""A simulated vLLM: OpenAI-compatible API process plus a ``VLLM::EngineCore`` child.

Start it with ``python -m sentinel_sim --port 0 --control-port 0`` or, from Python,
with :class:`sentinel_sim.launch.SimProcess`; inject faults through
:class:`sentinel_sim.control.SimControl`. Submodules import lazily so the engine
child stays cheap to start.

So the face names nothing: importing the package must load none of the API
process's libraries into the engine child. The names other packages use stay
at their modules: :class:`~sentinel_sim.launch.SimProcess`,
:class:`~sentinel_sim.control.SimControl` and ``satellite.TITLE``.
"""

__all__: list[str] = []
