"""One module per ``swarmshake`` subcommand, each exposing ``main(argv) -> int``.

The router in ``swarmshake.chaos.cli`` imports a command's module only when that
command runs, so ``swarmshake doctor`` does not pay for importing torch.
"""
