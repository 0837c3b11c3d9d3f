from __future__ import annotations

import pytest

from swarmshake.reference_node.training.config import (
    TrainingConfig,
    TrainingConfigError,
    parse_parameter_count,
    sized_for,
)


@pytest.mark.parametrize("target", [1_000_000, 100_000_000, 250_000_000])
def test_sized_for_hits_the_target_parameter_count(target: int) -> None:
    config = sized_for(target)
    width = config.hidden[0]
    # within one width step of the target: (depth-1) * 2w + ... parameters per unit of width
    assert abs(config.parameter_count() - target) <= 2 * len(config.hidden) * width + 100
    assert len(config.hidden) == 4


def test_parameter_count_matches_layer_shapes() -> None:
    config = TrainingConfig(input_dim=3, output_dim=2, hidden=[5])
    assert config.parameter_count() == (3 * 5 + 5) + (5 * 2 + 2)


def test_krum_needs_2f_plus_3_nodes_with_a_clear_error() -> None:
    config = TrainingConfig(aggregation="krum", byzantine_f=1)
    config.check_cluster(5)
    with pytest.raises(TrainingConfigError, match=r"2f\+3=5 nodes, the cluster has 4"):
        config.check_cluster(4)


def test_trimmed_mean_needs_more_than_2f_nodes() -> None:
    with pytest.raises(TrainingConfigError, match="needs more than 2 nodes"):
        TrainingConfig(aggregation="trimmed_mean", byzantine_f=1).check_cluster(2)


@pytest.mark.parametrize(
    ("fields", "fewest"),
    [
        ({"aggregation": "mean"}, 1),
        ({"aggregation": "median", "byzantine_f": 1}, 3),
        ({"aggregation": "median", "byzantine_f": 0}, 1),
        ({"aggregation": "trimmed_mean", "byzantine_f": 2}, 5),
        ({"aggregation": "krum", "byzantine_f": 1}, 5),
        ({"aggregation": "multi_krum", "byzantine_f": 1, "multi_krum_m": 6}, 7),
    ],
)
def test_min_contributors_is_the_fewest_the_rule_aggregates(fields, fewest) -> None:
    config = TrainingConfig(**fields)
    assert config.min_contributors() == fewest
    config.check_cluster(fewest)
    with pytest.raises(TrainingConfigError):
        config.check_cluster(fewest - 1) if fewest > 1 else config.check_cluster(0)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"hidden": []}, "hidden"),
        ({"momentum": 1.0}, "momentum"),
        ({"batch_per_node": 0}, "batch_per_node"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_fields_are_named(fields: dict[str, object], named: str) -> None:
    with pytest.raises(TrainingConfigError, match=named):
        TrainingConfig(**fields)  # type: ignore[arg-type]


def test_from_dict_round_trips_and_rejects_unknown_fields() -> None:
    config = TrainingConfig(seed=3, hidden=[8, 8], aggregation="median")
    assert TrainingConfig.from_dict(config.to_dict()) == config
    with pytest.raises(TrainingConfigError, match="hiden"):
        TrainingConfig.from_dict({"hiden": [8]})
    with pytest.raises(TrainingConfigError, match="aggregation"):
        TrainingConfig.from_dict({"aggregation": "average"})


def test_parse_parameter_count() -> None:
    assert parse_parameter_count("1M") == 1_000_000
    assert parse_parameter_count("100m") == 100_000_000
    assert parse_parameter_count("2.5k") == 2500
    with pytest.raises(TrainingConfigError, match="not a parameter count"):
        parse_parameter_count("lots")
