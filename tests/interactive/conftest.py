from .fixtures import serving_job  # noqa: F401 - the fixture, for this directory's tests
