"""`python -m eagle3kit ...` (what `torchrun -m eagle3kit train ...` runs): the CLI."""

from eagle3kit.cli import main

if __name__ == "__main__":
    main()
