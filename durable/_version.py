"""The package's version, in one place (read by the build and by ``durable.__version__``)."""

__version__ = "0.2.0.dev0"
