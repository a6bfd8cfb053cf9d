"""Makes the image's pure-Python modules (images/dss_train) importable in the host venv."""

import sys
from pathlib import Path

IMAGES = Path(__file__).resolve().parents[3] / "images"
if str(IMAGES) not in sys.path:
    sys.path.insert(0, str(IMAGES))
