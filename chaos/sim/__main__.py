"""``python -m chaos.sim``: run the simulated vLLM (see :mod:`chaos.sim.server`)."""

from chaos.sim.server import main

raise SystemExit(main())
