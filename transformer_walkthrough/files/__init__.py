"""Files out and in: exports written atomically and exclusively (``export``), weights read from an
untrusted ``.npz`` with every header checked first (``npzfile``), and every file the tool reads
opened only once it is a regular file of a bounded size (``regular``)."""
