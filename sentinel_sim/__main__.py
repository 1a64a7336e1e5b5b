"""``python -m sentinel_sim``: run the simulated vLLM (see :mod:`sentinel_sim.app`)."""

from sentinel_sim.app import main

raise SystemExit(main())
