from .exec_fixtures import paddlectl  # noqa: F401 - the fixture, for this directory's tests
from .fixtures import serving_job  # noqa: F401 - the fixture, for this directory's tests
