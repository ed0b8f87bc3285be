"""Every rule a job submission is checked against, each answered with the field and the rule."""

from __future__ import annotations

import pytest

from jobs.models import Job
from jobs.spec import job_spec_validate
from kernel.errors import ValidationError
from paddlecloud_core.contract import JOB_NAME_MAX as MAX_NAME
from tests.factories import job_fields

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(pfs_home, package):
    """alice's home on disk: her package, and a file that is not one."""
    (pfs_home / "notes.txt").write_text("not a package\n")
    return pfs_home


@pytest.fixture
def validate(alice, datacenter, home):
    """``validate(**changes)``: alice's job ``fit-a-line`` (``job_fields``) checked, with
    ``changes`` (``...`` leaves a field out); its spec."""
    def check(**changes):
        data = {**job_fields(alice, datacenter, "fit-a-line"), **changes}
        return job_spec_validate(alice, datacenter, {k: v for k, v in data.items()
                                                     if v is not ...})
    return check


def refused(validate, field: str, **changes) -> str:
    """The first message for ``field``, checking it is also named in the summary."""
    with pytest.raises(ValidationError) as raised:
        validate(**changes)
    error = raised.value
    assert error.status == 400
    assert field in error.fields, error.fields
    assert f"{field}: {error.fields[field][0]}" in error.message
    return error.fields[field][0]


def test_a_minimal_job_gets_the_defaults(validate, datacenter):
    spec = validate()
    assert spec.name == "fit-a-line"
    assert spec.package == "/pfs/datacenter1/home/alice/pkg"
    assert spec.image == datacenter.image
    assert (spec.trainers, spec.pservers, spec.cpu, spec.memory, spec.gpu) == \
        (1, 0, 1000, 2**30, 0)
    assert (spec.passes, spec.restart_limit, spec.env) == (1, 0, {})


def test_the_seeds_flag_names_are_understood(alice, datacenter, home):
    spec = job_spec_validate(alice, datacenter, {
        "jobname": "ctr", "parallelism": 10, "pservers": 3, "cpu": "1", "memory": "1Gi",
        "pscpu": "500m", "psmemory": "512Mi", "passes": 2, "entry": "python train.py",
        "package_path": "/pfs/datacenter1/home/alice/pkg/"})
    assert (spec.name, spec.trainers, spec.pservers) == ("ctr", 10, 3)
    assert (spec.cpu, spec.memory, spec.pscpu, spec.psmemory) == \
        (1000, 2**30, 500, 512 * 2**20)
    assert spec.package == "/pfs/datacenter1/home/alice/pkg"  # canonical, no trailing slash


# --- name --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "says"), [
    ("my_job", "'_' is not allowed"),
    ("my.job", "'.' is not allowed: it breaks the Kubernetes service names"),
    ("MyJob", "lower-case"),
    ("-job", "starting and ending with a letter or digit"),
    ("job-", "starting and ending with a letter or digit"),
    ("job name", "only lower-case letters, digits and '-'"),
    ("a" * (MAX_NAME + 1), f"at most {MAX_NAME} characters"),
    ("", "required"),
])
def test_bad_names(validate, name, says):
    assert says in refused(validate, "name", name=name)


def test_name_missing(validate):
    assert "required" in refused(validate, "name", name=...)


def test_the_longest_name_is_accepted(validate):
    assert validate(name="a" * MAX_NAME).name == "a" * MAX_NAME


def test_names_are_unique_per_owner(validate, alice, datacenter, make_user):
    Job.objects.create(owner=alice, datacenter=datacenter, name="fit-a-line",
                       package="/pfs/datacenter1/home/alice/pkg", entry="x", image="i")
    message = refused(validate, "name")
    assert "you already have a job named 'fit-a-line'" in message
    # Another user may use the same name.
    bob = make_user("bob")
    bob_pkg = datacenter.pfs_root_path / "home" / "bob" / "pkg"
    bob_pkg.mkdir(parents=True)
    spec = job_spec_validate(bob, datacenter, {"name": "fit-a-line", "entry": "python t.py",
                                               "package": "/pfs/datacenter1/home/bob/pkg"})
    assert spec.name == "fit-a-line"


# --- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "millicores"), [("1", 1000), ("0.5", 500), ("500m", 500),
                                                   (2, 2000)])
def test_cpu_as_cores_or_millicores(validate, value, millicores):
    assert validate(cpu=value, pscpu=value).cpu == millicores


@pytest.mark.parametrize("value", ["lots", "1Gi", "-1", "0", "0.0001", True])
def test_bad_cpu(validate, value):
    refused(validate, "cpu", cpu=value)


@pytest.mark.parametrize(("value", "size"), [("512Mi", 512 * 2**20), ("2Gi", 2 * 2**30),
                                             ("1G", 10**9), ("100K", 10**5)])
def test_memory_with_binary_or_decimal_units(validate, value, size):
    assert validate(memory=value).memory == size


@pytest.mark.parametrize("value", ["lots", "1.5", "0", "1Xi", "1GB", "512MB"])
def test_bad_memory(validate, value):
    refused(validate, "memory", memory=value)


def test_bad_pserver_resources(validate):
    with pytest.raises(ValidationError) as raised:
        validate(pservers=1, pscpu="x", psmemory="y")
    assert set(raised.value.fields) == {"pscpu", "psmemory"}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("gpu", 1.5, "not a whole number"),
    ("gpu", "two", "not a whole number"),
    ("gpu", -1, "between 0 and"),
    ("trainers", 0, "between 1 and"),
    ("pservers", -1, "between 0 and"),
    ("passes", 0, "between 1 and"),
    ("restart_limit", -1, "between 0 and"),
    ("deadline_seconds", 0, "between 1 and"),
    ("trainers", True, "not a whole number"),
])
def test_counts(validate, field, value, says):
    assert says in refused(validate, field, **{field: value})


def test_counts_may_be_strings_of_digits(validate):
    spec = validate(trainers="2", pservers="1", gpu="1", deadline_seconds="3600")
    assert (spec.trainers, spec.pservers, spec.gpu, spec.deadline_seconds) == (2, 1, 1, 3600)


# --- package, entry, image, topology -----------------------------------------------------------


def test_package_must_exist(validate):
    message = refused(validate, "package", package="/pfs/datacenter1/home/alice/missing")
    assert "is not a directory in PFS" in message


def test_package_must_be_a_directory(validate):
    assert "is not a directory" in refused(
        validate, "package", package="/pfs/datacenter1/home/alice/notes.txt")


@pytest.mark.parametrize(("package", "says"), [
    ("/pfs/datacenter1/home/bob/pkg", "does not exist (your home is /pfs/datacenter1/home/alice)"),
    ("/pfs/datacenter2/home/alice/pkg", "datacenter 'datacenter2'"),
    ("/pfs/datacenter1/home/alice/../bob/pkg", "'..' is not allowed"),
    ("./pkg", "is not a PFS path"),
    ("/home/alice/pkg", "is not a PFS path"),
])
def test_package_outside_the_users_home(validate, package, says):
    assert says in refused(validate, "package", package=package)


def test_package_from_the_public_dir(validate, datacenter):
    (datacenter.public_path / "examples" / "fit_a_line").mkdir(parents=True)
    spec = validate(package="/pfs/datacenter1/public/examples/fit_a_line")
    assert spec.package == "/pfs/datacenter1/public/examples/fit_a_line"


def test_package_required(validate):
    assert "required" in refused(validate, "package", package=...)


@pytest.mark.parametrize("entry", [..., "", "   "])
def test_entry_required(validate, entry):
    assert "python train.py" in refused(validate, "entry", entry=entry)


def test_image_defaults_and_is_checked(validate):
    assert validate(image="registry.example.com:5000/team/paddle:2.6").image == \
        "registry.example.com:5000/team/paddle:2.6"
    assert "is not an image reference" in refused(validate, "image", image="not an image")


def test_topology_is_a_file_in_the_package(validate):
    assert validate(topology="train.py").topology == "train.py"
    assert "is not a file in the package" in refused(validate, "topology", topology="nope.py")
    assert "without '..'" in refused(validate, "topology", topology="../x.py")


# --- env ---------------------------------------------------------------------------------------


def test_extra_env(validate):
    assert validate(env={"NUM_PASS": "4", "_X1": ""}).env == {"NUM_PASS": "4", "_X1": ""}


@pytest.mark.parametrize(("name", "value", "says"), [
    ("1BAD", "x", "not a valid variable name"),
    ("WITH-DASH", "x", "not a valid variable name"),
    ("TRAINER_ID", "3", "reserved"),
    ("PADDLE_TRAINERS_NUM", "3", "reserved"),
    ("PADDLE_INIT_PSERVERS", "x", "reserved"),
    ("NUM_PASS", 4, "values are strings"),
])
def test_bad_env(validate, name, value, says):
    assert says in refused(validate, f"env.{name}", env={name: value})


def test_env_must_be_an_object(validate):
    refused(validate, "env", env=["A=1"])


# --- all at once -------------------------------------------------------------------------------


def test_every_mistake_is_reported_at_once(validate):
    with pytest.raises(ValidationError) as raised:
        validate(name="Bad_Name", cpu="lots", trainers=0, entry="", colour="blue",
               env={"TRAINER_ID": "1"})
    assert set(raised.value.fields) == {"name", "cpu", "trainers", "entry", "colour",
                                        "env.TRAINER_ID"}
    assert raised.value.fields["colour"] == ["unknown field"]
