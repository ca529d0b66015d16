"""The quota split through the API (``/api/v1/splits/{group}/``) decides as the portal's split page
does (rule: each decision works in the portal, the admin and the API): the same people may split,
the same rules refuse a split whole naming the unit and the field, the same version check refuses
a stale split with 409, and each saved change is audited. Demo estate: Language reserves 80, limit
200, 40000 h per month; pretraining 48/160/24000 h, alignment 24/64/8000 h. Acme Labs reserves 220,
limit 280: Research 140 + Products 80."""

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.policies import selectors
from apps.policies import services as policies
from apps.policies.models import BudgetWindow, PolicyChange, ResourcePolicy
from apps.portal import demo

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

LANGUAGE = "/api/v1/splits/language/"
ACME = "/api/v1/splits/acme/"


@pytest.fixture
def estate(db):
    demo.seed()


def api(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def unit(slug: str, **changes) -> dict:
    """A unit's row as stored now, with ``changes``."""
    p = policy(slug)
    return {
        "group": slug,
        "reservation": str(p.reservation),
        "limit": str(p.limit),
        "budget_hours": None if p.budget_hours is None else str(p.budget_hours),
        "budget_period": p.budget_period,
        "version": p.version,
    } | changes


def quotas(*slugs: str) -> dict:
    return {slug: (policy(slug).reservation, policy(slug).limit, policy(slug).budget_hours) for slug in slugs}


def test_the_split_lists_the_envelope_and_each_unit_directly_below_with_its_version(estate):
    body = api("head-language").get(LANGUAGE).json()
    assert (body["group"], body["name"], body["budget_period"], body["windows"]) == (
        "language",
        "Language",
        "month",
        {},
    )
    assert [Decimal(body[f]) for f in ("reservation", "limit", "budget_hours")] == [80, 200, 40000]
    assert [(u["group"], u["name"], Decimal(u["reservation"]), u["version"]) for u in body["units"]] == [
        ("alignment", "Alignment", Decimal(24), policy("alignment").version),
        ("pretraining", "Pretraining", Decimal(48), policy("pretraining").version),
    ]


def test_a_department_head_moves_gpus_and_hours_between_teams_saved_together_and_audited(estate):
    head = User.objects.get(username="head-language")
    response = api("head-language").post(
        LANGUAGE,
        {
            "units": [
                unit("pretraining", reservation="40", budget_hours="20000", windows={"week": "6000"}),
                unit("alignment", reservation="32", budget_hours="12000"),
            ]
        },
    )
    assert response.status_code == 200
    assert quotas("pretraining", "alignment") == {
        "pretraining": (Decimal(40), Decimal(160), Decimal(20000)),
        "alignment": (Decimal(32), Decimal(64), Decimal(12000)),
    }
    assert list(
        BudgetWindow.objects.filter(policy__group__slug="pretraining").values_list("period", "hours")
    ) == [("week", Decimal(6000))]
    rows = {u["group"]: u for u in response.json()["units"]}
    assert Decimal(rows["alignment"]["reservation"]) == 32 and rows["pretraining"]["windows"] == {
        "week": "6000.000"
    }
    assert rows["alignment"]["version"] == policy("alignment").version
    audit = PolicyChange.objects.all()
    assert {(c.policy.group.slug, c.actor, c.via) for c in audit} == {
        ("pretraining", head, PolicyChange.Via.PORTAL),
        ("alignment", head, PolicyChange.Via.PORTAL),
    }
    alignment = audit.get(policy__group__slug="alignment")
    assert alignment.changes["reservation"] == ["24.000", "32.000"]


def test_leadership_splits_the_organisation_among_business_units(estate):
    # Vision gives up 10 of its 60 first, so that Research may go down to 130.
    policies.update_policy(policy("vision"), reservation=Decimal(50))
    response = api("cio").post(
        ACME,
        {
            "units": [
                unit("research", reservation="130", budget_hours="50000", budget_period="month"),
                unit("products", reservation="90", limit="210"),
            ]
        },
    )
    assert response.status_code == 200
    assert quotas("research", "products") == {
        "research": (Decimal(130), Decimal(240), Decimal(50000)),
        "products": (Decimal(90), Decimal(210), None),
    }
    assert set(PolicyChange.objects.values_list("policy__group__slug", "actor__username")) == {
        ("research", "cio"),
        ("products", "cio"),
    }


def test_a_split_that_breaks_a_rule_is_refused_naming_the_unit_and_field_and_nothing_is_saved(estate):
    before = quotas("alignment", "pretraining")
    response = api("head-language").post(
        LANGUAGE, {"units": [unit("alignment", reservation="40"), unit("pretraining", limit="50")]}
    )
    assert response.status_code == 400
    assert response.json() == {
        "units": {
            "alignment": {
                "reservation": [
                    "Reservation (40) brings the reservations under Language policy to 88, "
                    "above its reservation (80)."
                ]
            }
        }
    }
    assert quotas("alignment", "pretraining") == before
    assert not PolicyChange.objects.exists()


def test_bad_input_is_refused_on_the_unit_and_field_with_the_reason(estate):
    response = api("head-language").post(
        LANGUAGE,
        {
            "units": [
                unit("alignment", reservation="1.2345", limit="lots"),
                unit("pretraining", windows={"year": "5"}),
            ]
        },
    )
    assert response.status_code == 400
    errors = response.json()["units"]
    assert errors["alignment"]["reservation"] == ["Ensure that there are no more than 3 decimal places."]
    assert "limit" in errors["alignment"]
    assert errors["pretraining"] == {"windows": ["Unknown period year: use day, week, month."]}


@pytest.mark.parametrize(
    "units, errors",
    [
        (["ranking"], {"ranking": {"group": ["ranking is not directly below Language."]}}),
        (["language"], {"language": {"group": ["language is not directly below Language."]}}),
        (["alignment", "alignment"], {"alignment": {"group": ["This unit is named twice."]}}),
    ],
    ids=["another-departments-team", "the-group-itself", "twice"],
)
def test_a_unit_not_directly_below_the_group_is_refused(estate, units, errors):
    response = api("head-language").post(LANGUAGE, {"units": [unit(slug) for slug in units]})
    assert response.status_code == 400 and response.json() == {"units": errors}


def test_a_split_without_units_or_a_version_is_refused(estate):
    client = api("head-language")
    assert client.post(LANGUAGE, {"units": []}).json() == {"units": ["Name at least one unit."]}
    row = {k: v for k, v in unit("alignment").items() if k != "version"}
    response = client.post(LANGUAGE, {"units": [row]})
    assert response.status_code == 400 and "version" in response.json()["units"]["alignment"]


def test_a_split_made_on_a_version_saved_since_is_refused_with_409_and_nothing_saved(estate):
    stale = unit("alignment", reservation="20")
    assert api("it").post(LANGUAGE, {"units": [unit("alignment", limit="60")]}).status_code == 200
    response = api("head-language").post(LANGUAGE, {"units": [stale]})
    assert response.status_code == 409
    assert "changed by someone else" in response.json()["detail"]
    assert (policy("alignment").reservation, policy("alignment").limit) == (24, 60)


@pytest.mark.parametrize(
    "username, url",
    [
        ("it", LANGUAGE),
        ("it", ACME),
        ("head-language", LANGUAGE),
        ("tenant-vision", "/api/v1/splits/vision/"),
    ],
)
def test_who_may_split_a_group_reads_its_split(estate, username, url):
    assert api(username).get(url).status_code == 200


@pytest.mark.parametrize(
    "username, url",
    [
        ("lead-pretraining", LANGUAGE),
        ("dev-pretraining", LANGUAGE),
        ("finance", LANGUAGE),
        ("cio", LANGUAGE),
        ("head-language", "/api/v1/splits/vision/"),
        ("head-language", ACME),
        ("finance", ACME),
    ],
)
def test_who_may_not_split_a_group_gets_403_on_reading_and_saving_it(estate, username, url):
    client = api(username)
    slug = url.rstrip("/").rsplit("/", 1)[1]
    units = [unit(p.group.slug) for p in selectors.child_policies(policy(slug))]
    before = {u["group"]: quotas(u["group"]) for u in units}
    assert client.get(url).status_code == 403
    assert client.post(url, {"units": [dict(u, reservation="0") for u in units]}).status_code == 403
    assert {u["group"]: quotas(u["group"]) for u in units} == before


def test_an_unknown_group_is_404_and_an_anonymous_caller_401(estate):
    assert api("it").get("/api/v1/splits/nowhere/").status_code == 404
    assert api("it").post("/api/v1/splits/nowhere/", {"units": []}).status_code == 404
    assert APIClient().get(LANGUAGE).status_code == 401
