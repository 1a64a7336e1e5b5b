"""``python -m sentinel_sim``: run the simulated vLLM (see :mod:`sentinel_sim.server`)."""

from sentinel_sim.server import main

raise SystemExit(main())
