"""`python -m autotuner.cli`: the same CLI as the `autotuner` command."""

from autotuner.cli import main

main()
