"""Machine profiles: the shipped ones load, a written profile reads back equal, and every
kind of bad profile is refused with an error that names the key."""

import tomllib

import pytest

from pybpf.profiles import (
    SCHEMA,
    ProfileError,
    Value,
    dumps_profile,
    load_profile,
    parse_profile,
    shipped_profiles,
    validate,
)


def synthetic_values(cpus: int = 4, nodes: int = 2) -> dict[str, Value]:
    """A complete, plausible cost table (made up for tests, every source says so)."""
    numbers = {"topology.cpus": cpus, "topology.nodes": nodes,
               "topology.distances": [[10 if i == j else 21 for j in range(nodes)]
                                      for i in range(nodes)],
               "memory.line_bytes": 64, "memory.private_kib": 256, "memory.shared_kib": 1024,
               "memory.shared_hit": 20.0, "memory.dram_local": 90.0, "memory.dram_remote": 140.0,
               "memory.transfer_local": 40.0, "memory.transfer_remote": 110.0,
               "cpu.clock_ghz": 2.5, "rcu.grace_period": 4e6}
    return {p.path: Value(numbers.get(p.path, 10.0), "made up for a test") for p in SCHEMA}


def doc_of(values: dict[str, Value], **top) -> dict:
    doc: dict = {"format": 1, "name": "t", "description": "test profile", **top}
    for path, v in values.items():
        section, key = path.split(".")
        doc.setdefault(section, {})[key] = {"value": v.value, "source": v.source}
    return doc


def test_shipped_profiles_include_host_and_two_servers():
    names = shipped_profiles()
    assert "host" in names
    assert len(names) >= 3


@pytest.mark.parametrize("name", shipped_profiles())
def test_shipped_profile_loads_with_a_source_for_every_value(name):
    profile = load_profile(name)
    assert set(profile.values) == {p.path for p in SCHEMA}
    for path, value in profile.values.items():
        assert len(value.source) > 10, f"{name}: {path} has no real source"


@pytest.mark.parametrize("name", shipped_profiles())
def test_shipped_profile_reads_back_equal_after_writing(name):
    profile = load_profile(name)
    again = parse_profile(tomllib.loads(dumps_profile(profile)))
    assert again.values == profile.values
    assert again.reference == profile.reference
    assert (again.name, again.description) == (profile.name, profile.description)


def test_written_profile_escapes_quotes_and_backslashes():
    values = synthetic_values()
    values["cpu.bpf_insn"] = Value(0.5, 'a "quoted" source with a \\ backslash\nand a newline')
    profile = validate("q", "quotes", values)
    assert parse_profile(tomllib.loads(dumps_profile(profile))).values == profile.values


def test_profile_by_path(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(dumps_profile(validate("mine", "my machine", synthetic_values())))
    assert load_profile(str(path)).name == "mine"


def test_unknown_profile_name_lists_the_shipped_ones():
    with pytest.raises(ProfileError, match="host"):
        load_profile("no-such-machine")


def test_multi_node_profile_spreads_cpus_contiguously():
    profile = validate("t", "t", synthetic_values(cpus=4, nodes=2))
    assert profile.cpu_node == [0, 0, 1, 1]


def refused(doc: dict, *needles: str) -> None:
    with pytest.raises(ProfileError) as exc:
        parse_profile(doc, "x.toml")
    for needle in needles:
        assert needle in str(exc.value)


def test_missing_value_is_named():
    doc = doc_of(synthetic_values())
    del doc["memory"]["dram_remote"]
    refused(doc, "x.toml", "memory.dram_remote")


def test_a_profile_without_the_net_section_gets_its_estimates_at_its_clock():
    doc = doc_of(synthetic_values())
    del doc["net"]  # written before the cpumap path was modeled
    profile = parse_profile(doc)
    assert profile["net.netif_receive_skb"] == pytest.approx(800 / 2.5)
    assert profile.source("net.netif_receive_skb").startswith("estimate: 800 cycles at 2.50 GHz")


def test_a_net_section_without_the_later_keys_gets_their_estimates():
    doc = doc_of(synthetic_values())
    del doc["net"]["kworker_wakeup"]  # written before the sockmap path was modeled
    profile = parse_profile(doc)
    assert profile["net.kworker_wakeup"] == pytest.approx(2500 / 2.5)
    assert profile.source("net.kworker_wakeup").startswith("estimate: 2500 cycles at 2.50 GHz")
    assert profile["net.netif_receive_skb"] == doc["net"]["netif_receive_skb"]["value"]


def test_unknown_key_is_named_with_the_known_ones():
    doc = doc_of(synthetic_values())
    doc["cpu"]["syscal_entry"] = {"value": 1.0, "source": "typo"}
    refused(doc, "cpu.syscal_entry", "syscall_entry")


def test_unknown_section_is_named():
    refused(doc_of(synthetic_values(), costs={}), "costs")


def test_value_without_source_is_refused():
    doc = doc_of(synthetic_values())
    doc["cpu"]["bpf_insn"] = {"value": 1.0}
    refused(doc, "cpu.bpf_insn", "source")
    doc["cpu"]["bpf_insn"] = {"value": 1.0, "source": "  "}
    refused(doc, "cpu.bpf_insn", "source")


@pytest.mark.parametrize("bad", [-1.0, "fast", True, float("inf")])
def test_cost_must_be_a_finite_non_negative_number(bad):
    doc = doc_of(synthetic_values())
    doc["ops"]["htab_map_lookup_elem"]["value"] = bad
    refused(doc, "ops.htab_map_lookup_elem")


def test_counts_must_be_integers():
    doc = doc_of(synthetic_values())
    doc["topology"]["cpus"]["value"] = 4.5
    refused(doc, "topology.cpus", "integer")


@pytest.mark.parametrize("dist, needle", [
    ([[10, 21]], "2 x 2"),
    ([[10, 21], [21, 11]], "distances[1][1]"),
    ([[10, 9], [21, 10]], "distances[0][1]"),
    ([[10, "far"], [21, 10]], "distances[0][1]"),
])
def test_distance_matrix_is_checked(dist, needle):
    doc = doc_of(synthetic_values())
    doc["topology"]["distances"]["value"] = dist
    refused(doc, needle)


def test_more_nodes_than_cpus_is_refused():
    doc = doc_of(synthetic_values(cpus=2, nodes=2))
    doc["topology"]["nodes"]["value"] = 3
    refused(doc, "topology.nodes")


@pytest.mark.parametrize("key, value, needle", [
    ("dram_remote", 50.0, "memory.dram_local"),
    ("shared_hit", 100.0, "memory.shared_hit"),
    ("transfer_remote", 10.0, "transfer_local"),
    ("line_bytes", 48, "power of two"),
])
def test_memory_levels_must_be_ordered(key, value, needle):
    doc = doc_of(synthetic_values())
    doc["memory"][key]["value"] = value
    refused(doc, needle)


def test_format_must_be_known():
    refused(doc_of(synthetic_values(), format=2), "format")


def test_reference_figures_need_a_number_and_a_source():
    doc = doc_of(synthetic_values(), reference={"map_perf_x": {"value": 100.0,
                                                               "source": "measured"}})
    assert parse_profile(doc).reference["map_perf_x"].value == 100.0
    doc["reference"]["map_perf_x"] = {"value": "fast", "source": "measured"}
    refused(doc, "reference.map_perf_x")


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("format = = 1\n")
    with pytest.raises(ProfileError, match="broken.toml"):
        load_profile(str(path))
