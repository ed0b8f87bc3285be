from tests.k8s_api_server.fixtures import k8s_api  # noqa: F401 - the fake API server fixture
