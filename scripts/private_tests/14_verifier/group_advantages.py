"""Chapter 14, exercise 1: each reward minus its group's mean, over the group's unbiased std
plus 1e-4."""

import torch
from grading.cases import Case, Step

name = "group_advantages"


def case(label, groups, G, rewards):
    grouped = rewards.double().view(groups, G)
    expected = ((grouped - grouped.mean(1, keepdim=True))
                / (grouped.std(1, keepdim=True) + 1e-4)).flatten().float()
    # no dtype is stated: any, compared in float64
    return Case(label, [Step((rewards, G))], [expected], atol=1e-4, rtol=1e-4,
                exact_dtype=False)


def cases(g):
    right_wrong = (g.rand(5 * 8) < 0.5).float()
    right_wrong[8:16] = 1.0  # a group of equal rewards: advantages 0
    return [
        case("right_or_wrong_rewards_one_group_unanimous", 5, 8, right_wrong),
        case("rewards_in_0_1_groups_of_4", 6, 4, g.rand(6 * 4)),
    ]
