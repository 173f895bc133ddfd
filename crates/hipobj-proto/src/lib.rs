//! hipObject wire formats (token and reply), pure code with no I/O.
