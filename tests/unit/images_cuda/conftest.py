"""Makes the CUDA variant's wheel tool (images-cuda/wheels.py) importable as `wheels`."""

import sys
from pathlib import Path

IMAGES_CUDA = Path(__file__).resolve().parents[3] / "images-cuda"
if str(IMAGES_CUDA) not in sys.path:
    sys.path.insert(0, str(IMAGES_CUDA))
