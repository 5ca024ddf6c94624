"""The toolkit's own small exception hierarchy. Third-party errors are mapped onto these at the boundary."""


class S3Error(Exception):
    """Base class of every error the toolkit raises on purpose (bad input, missing files, failed services)."""


class ConfigError(S3Error):
    """A configuration value is unknown, malformed or inconsistent."""


class DataFormatError(S3Error):
    """An input file does not have the expected shape (the message names the file and line)."""


class IndexDirError(S3Error):
    """An index directory is missing, incomplete, or does not match its corpus / encoder."""


class RetrievalError(S3Error):
    """A retriever could not answer (bad query, remote server down after retries, ...)."""


class ServiceError(S3Error):
    """A remote service failed after the last retry."""
