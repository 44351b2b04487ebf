"""Files out and in: exports written atomically and exclusively (``export``), and weights read
from an untrusted ``.npz`` with every header checked first (``npzfile``)."""
