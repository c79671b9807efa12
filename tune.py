#!/usr/bin/env python3
"""cutlass-conv-tuner: `python tune.py --layer conv_1`. The work lives in tuner/."""
import sys

from tuner.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
