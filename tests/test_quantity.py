"""Resource quantities as users write them in quotas and job specs."""

from __future__ import annotations

import pytest

from paddlecloud_core.quantity import (
    QuantityError,
    format_bytes,
    format_bytes_about,
    format_cpu,
    parse_bytes,
    parse_cpu,
)

GiB = 2**30
MiB = 2**20


@pytest.mark.parametrize(
    ("written", "millicores"),
    [
        ("1", 1000),
        ("0.5", 500),
        ("500m", 500),
        ("1500m", 1500),
        ("2.25", 2250),
        (" 4 ", 4000),
        ("0", 0),
        (2, 2000),
        (0.5, 500),
    ],
)
def test_parse_cpu_reads_cores_and_millicores(written, millicores):
    assert parse_cpu(written) == millicores


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("1.0001", "finer than one millicore"),
        ("0.5m", "finer than one millicore"),
        ("abc", "is not a CPU amount"),
        ("-1", "is not a CPU amount"),
        ("1Gi", "is not a CPU amount"),
        ("", "is not a CPU amount"),
        ("1 core", "is not a CPU amount"),
    ],
)
def test_parse_cpu_rejects_what_is_not_a_cpu_amount(written, message):
    with pytest.raises(QuantityError, match=message) as raised:
        parse_cpu(written)
    # The message quotes what the user wrote, so they can find it.
    assert repr(written) in str(raised.value)


def test_quantity_error_is_a_value_error():
    """Callers that catch ValueError (argparse type= functions, forms) see it too."""
    with pytest.raises(ValueError, match="not a CPU amount"):
        parse_cpu("lots")


@pytest.mark.parametrize(
    ("written", "amount"),
    [
        ("1024", 1024),
        ("0", 0),
        ("512Mi", 512 * MiB),
        ("2G", 2 * 10**9),
        ("1.5Gi", 3 * GiB // 2),
        ("0.5Ki", 512),
        ("1K", 1000),
        ("1k", 1000),
        ("1Ki", 1024),
        ("16Gi", 16 * GiB),
        ("2Ti", 2 * 2**40),
        ("100GiB", 100 * GiB),
        (" 8 Gi ", 8 * GiB),
        (4096, 4096),
    ],
)
def test_parse_bytes_reads_binary_and_decimal_units(written, amount):
    assert parse_bytes(written) == amount


@pytest.mark.parametrize(
    ("cpu", "memory", "millicores", "amount"),
    [("3920m", "16318712Ki", 3920, 16318712 * 1024), ("4", "32Gi", 4000, 32 * GiB),
     ("15890m", "63870028Ki", 15890, 63870028 * 1024), ("96", "768000M", 96000, 768 * 10**9)],
)
def test_a_kubernetes_nodes_allocatable_reads(cpu, memory, millicores, amount):
    """As a node's ``status.allocatable`` writes them (a datacenter's capacity from its
    cluster)."""
    assert (parse_cpu(cpu), parse_bytes(memory)) == (millicores, amount)


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("lots", "is not an amount of bytes"),
        ("-1", "is not an amount of bytes"),
        ("1ki", "is not an amount of bytes"),
        ("1e9", "is not an amount of bytes"),
        ("", "is not an amount of bytes"),
        ("1.5", "is not a whole number of bytes"),
        # A B after a decimal unit: GB may mean GiB to whoever wrote it, so it is asked for.
        ("1GB", "ambiguous: write 1G \\(units of 10\\^9 bytes\\) or 1Gi \\(units of 2\\^30"),
        ("512MB", "ambiguous: write 512M .* or 512Mi"),
        ("2kb", "ambiguous: write 2k .* or 2Ki"),
    ],
)
def test_parse_bytes_rejects_what_is_not_an_amount_of_bytes(written, message):
    with pytest.raises(QuantityError, match=message) as raised:
        parse_bytes(written)
    assert repr(written) in str(raised.value)


@pytest.mark.parametrize(
    ("millicores", "written"),
    [(4000, "4"), (1000, "1"), (500, "500m"), (1500, "1500m"), (1, "1m"), (0, "0")],
)
def test_format_cpu(millicores, written):
    assert format_cpu(millicores) == written


@pytest.mark.parametrize(
    ("amount", "written"),
    [
        (8 * GiB, "8Gi"),
        (512 * MiB, "512Mi"),
        (3 * GiB // 2, "1536Mi"),
        (1024, "1Ki"),
        (2**40, "1Ti"),
        (1000, "1k"),
        (2 * 10**9, "2G"),
        (10**9 + 1, "1000000001"),
        (1536, "1536"),
        (1, "1"),
        (0, "0"),
    ],
)
def test_format_bytes_is_exact_and_as_short_as_a_unit_makes_it(amount, written):
    assert format_bytes(amount) == written


@pytest.mark.parametrize(
    ("amount", "written"),
    [
        (20034464, "19.1Mi"),
        (15647, "15.3Ki"),
        (8 * GiB, "8Gi"),
        (300 * MiB + 1, "300Mi"),
        (1023 * MiB, "1023Mi"),
        (1024 * MiB - MiB // 3, "1.0Gi"),
        (10**12, "931Gi"),
        (512, "512B"),
        (0, "0"),
    ],
)
def test_format_bytes_about_gives_people_three_digits_in_binary_units(amount, written):
    assert format_bytes_about(amount) == written


@pytest.mark.parametrize("millicores", [0, 1, 250, 500, 999, 1000, 1001, 4000, 123456])
def test_cpu_round_trips(millicores):
    assert parse_cpu(format_cpu(millicores)) == millicores


@pytest.mark.parametrize(
    "amount", [0, 1, 1000, 1024, 1536, 512 * MiB, 3 * GiB // 2, 8 * GiB, 10**12, 5 * 2**50]
)
def test_bytes_round_trip(amount):
    assert parse_bytes(format_bytes(amount)) == amount


@pytest.mark.parametrize("written", ["500m", "2", "1.5", "0.25"])
def test_written_cpu_survives_parse_format_parse(written):
    millicores = parse_cpu(written)
    assert parse_cpu(format_cpu(millicores)) == millicores
