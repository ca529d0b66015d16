"""The demo estate: a believable organisation, its pools, profiles and policies, and one user
per role. ``seed_demo`` loads it; running it again changes nothing."""

import itertools
import os
import sys
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, Project, User
from apps.cloud import services as cloud
from apps.cloud.models import CloudPool
from apps.core.writes import validated_save
from apps.policies import money_windows
from apps.policies import services as policies
from apps.policies.models import ComputeResource, Profile, ResourcePolicy
from apps.pools import services as pools
from apps.pools.models import SINCE_EVER, GpuType, Pool
from apps.pricing import services as pricing
from apps.pricing.models import NodePrice, Price
from apps.sessions.models import ProfileIdleLimits, SessionKind

DEMO_PASSWORD_ENV = "KLIQUE_DEMO_PASSWORD"
DEFAULT_DEMO_PASSWORD = "klique-demo-2026"

Role = Membership.Role
Kind = Group.Kind

# (slug, name, kind, parent slug)
GROUPS = [
    ("acme", "Acme Labs", Kind.ORGANISATION, None),
    ("research", "Research", Kind.BUSINESS_UNIT, "acme"),
    ("products", "Products", Kind.BUSINESS_UNIT, "acme"),
    ("vision", "Vision", Kind.DEPARTMENT, "research"),
    ("language", "Language", Kind.DEPARTMENT, "research"),
    ("search", "Search", Kind.DEPARTMENT, "products"),
    ("assistants", "Assistants", Kind.DEPARTMENT, "products"),
    ("perception", "Perception", Kind.TEAM, "vision"),
    ("generation", "Generation", Kind.TEAM, "vision"),
    ("pretraining", "Pretraining", Kind.TEAM, "language"),
    ("alignment", "Alignment", Kind.TEAM, "language"),
    ("ranking", "Ranking", Kind.TEAM, "search"),
    ("retrieval", "Retrieval", Kind.TEAM, "search"),
    ("serving", "Serving", Kind.TEAM, "assistants"),
    ("agents", "Agents", Kind.TEAM, "assistants"),
]
# Finance's cost centres: the business units carry one each, the rest inherit; Language books apart.
COST_CENTRES = {"research": "CC-4100", "products": "CC-4200", "language": "CC-4130"}

# (name, GPU memory in GB, generation: the CUDA compute capability's major number)
GPU_TYPES = [("A100-80GB", 80, 8), ("L40S", 48, 8), ("H100", 80, 9), ("CPU", 0, 0)]

# (name, kind, gpu type, declared capacity, region, country)
POOLS = [
    ("onprem-k8s", Pool.Kind.KUBERNETES, "A100-80GB", 64, "eu-west", "NL"),
    ("baremetal", Pool.Kind.BAREMETAL, "L40S", 16, "eu-west", "NL"),
    ("hpc-slurm", Pool.Kind.HPC, "H100", 128, "eu-west", "NL"),
    ("cloud-h100", Pool.Kind.CLOUD, "H100", 64, "us-east", "US"),
    ("sovereign", Pool.Kind.KUBERNETES, "A100-80GB", 8, "in-country", "DE"),
]

# profile name -> (sovereign country, minimum GPU memory in GB, minimum GPU generation)
PROFILE_CONSTRAINTS = {"sovereign-a100-1": ("DE", None, None), "a100-1": ("", 80, 8)}

# The cloud pool grows on demand: nodes are local `klique-worker` processes (docs/cloud.md), up
# to 8 of 8 GPUs (its declared capacity, 64), spot first; released after two idle minutes.
CLOUD_POOL = "cloud-h100"
CLOUD_INSTANCE_TYPE = ("local.h100x8", 8, 8)  # (name, GPUs per node, most nodes)
CLOUD_TIMEOUTS = {"boot_timeout_s": 120, "idle_timeout_s": 120, "spot_timeout_s": 60}
CLOUD_FOLDER_ENV = "KLIQUE_DEMO_CLOUD_FOLDER"


def cloud_folder() -> str:
    """Where the demo's local nodes keep their ledger, state folders and logs (read when the pool
    is seeded): ``var/cloud-nodes``, or ``$KLIQUE_DEMO_CLOUD_FOLDER`` to keep two demos apart."""
    return os.environ.get(CLOUD_FOLDER_ENV) or str(Path(settings.BASE_DIR) / "var" / "cloud-nodes")


# (name, gpus, time weight, size from task, pools in order, description)
PROFILES = [
    (
        "a100-quarter",
        "0.25",
        "0.25",
        False,
        ["onprem-k8s"],
        "A quarter of an A100 for sessions and endpoints",
    ),
    ("a100-1", "1", "1", False, ["onprem-k8s"], "One A100 on the on-prem cluster"),
    ("l40s-1", "1", "0.5", False, ["baremetal"], "One L40S on bare metal"),
    (
        "gpu-flex",
        "1",
        "1",
        True,
        ["onprem-k8s", "baremetal", "cloud-h100"],
        "1 to 8 GPUs, size from the task",
    ),
    ("h100-8", "8", "2", False, ["hpc-slurm", "cloud-h100"], "Eight H100 for training, HPC first"),
    ("cpu-only", "0", "0", False, ["baremetal", "onprem-k8s"], "CPU only, exempt from budgets"),
    ("sovereign-a100-1", "1", "1", False, ["sovereign"], "One A100 in-country only"),
]

# group slug -> (reservation, limit, budget hours, period)
POLICIES = {
    "acme": (220, 280, None, ""),
    "research": (140, 240, None, ""),
    "products": (80, 200, None, ""),
    "vision": (60, 120, None, ""),
    "language": (80, 200, 40000, "month"),
    "search": (40, 100, None, ""),
    "assistants": (40, 100, None, ""),
    "perception": (24, 64, None, ""),
    "generation": (24, 96, None, ""),
    "pretraining": (48, 160, 24000, "month"),
    "alignment": (24, 64, 8000, "month"),
    "ranking": (16, 48, 1500, "week"),
    "retrieval": (16, 48, None, ""),
    "serving": (20, 40, None, ""),
    "agents": (8, 24, 2, "day"),
}

# group slug -> {period: (amount, currency)}: money budget windows. The Agents team's 3 EUR a day
# (about 1.4 A100-hours at the demo's 2.10) runs out before its 2 budget hours, so the demo's
# load sees a money budget stop its work.
MONEY_WINDOWS = {"agents": {"day": ("3.00", "EUR")}}

# team slug -> profiles it may submit to
COMPUTE_RESOURCES = {
    "perception": ["a100-1", "a100-quarter", "gpu-flex"],
    "generation": ["a100-1", "gpu-flex", "h100-8"],
    "pretraining": ["h100-8", "gpu-flex", "cpu-only"],
    "alignment": ["a100-1", "h100-8", "sovereign-a100-1"],
    "ranking": ["l40s-1", "gpu-flex"],
    "retrieval": ["l40s-1", "a100-quarter"],
    "serving": ["a100-quarter", "a100-1"],
    "agents": ["a100-quarter", "gpu-flex", "cpu-only"],
}

PROJECTS = {
    "perception": ["detector-v3"],
    "generation": ["diffusion-xl"],
    "pretraining": ["llm-7b", "llm-70b"],
    "alignment": ["rlhf"],
    "ranking": ["ranker-2027"],
    "retrieval": ["embeddings"],
    "serving": ["chat-endpoint"],
    "agents": ["tool-use"],
}


def project_picker():
    """``pick(resource name)``: the next of its team's demo projects, in turn (None for a team
    without one), so demo work is spread over the teams' projects and "by group and project"
    reports and team leads' project pages have figures."""
    by_team: dict[str, list[Project]] = {}
    for project in Project.objects.filter(group__slug__in=PROJECTS).select_related("group"):
        by_team.setdefault(project.group.slug, []).append(project)
    turns = {slug: itertools.cycle(sorted(found, key=lambda p: p.name)) for slug, found in by_team.items()}

    def pick(resource: str) -> Project | None:
        turn = turns.get(resource.split("/")[0])
        return next(turn) if turn else None

    return pick


@dataclass(frozen=True)
class DemoUser:
    username: str
    role: str
    group: str
    full_name: str


DEMO_USERS = [
    DemoUser("it", Role.IT_ADMIN, "acme", "Ines Tanaka"),
    DemoUser("cio", Role.LEADERSHIP, "acme", "Carla Ortiz"),
    DemoUser("finance", Role.FINANCE, "acme", "Femi Nwosu"),
    DemoUser("head-language", Role.DEPARTMENT_HEAD, "language", "Hana Lindqvist"),
    DemoUser("tenant-vision", Role.TENANT_ADMIN, "vision", "Tomas Varga"),
    DemoUser("lead-pretraining", Role.TEAM_LEAD, "pretraining", "Luca Petrov"),
    DemoUser("dev-pretraining", Role.MEMBER, "pretraining", "Dara Perez"),
    DemoUser("dev-alignment", Role.MEMBER, "alignment", "Ali Amari"),
    DemoUser("dev-vision", Role.MEMBER, "perception", "Vera Vogel"),
    DemoUser("dev-generation", Role.MEMBER, "generation", "Gael Moreau"),
    DemoUser("dev-agents", Role.MEMBER, "agents", "Aiko Gunnarsson"),
    DemoUser("dev-ranking", Role.MEMBER, "ranking", "Raj Keller"),
]

PRICES = [("A100-80GB", "2.10"), ("L40S", "1.20"), ("H100", "3.40"), ("CPU", "0.00")]
PRICES_FROM = date(2026, 1, 1)


def demo_password() -> str:
    return os.environ.get(DEMO_PASSWORD_ENV) or DEFAULT_DEMO_PASSWORD


@transaction.atomic
def seed(password: str | None = None) -> dict[str, int]:
    """Create whatever of the demo estate is missing; return how many objects were created. New
    demo users get ``password`` (the demo password by default)."""
    created = {
        "groups": 0,
        "pools": 0,
        "cloud pools": 0,
        "profiles": 0,
        "policies": 0,
        "compute resources": 0,
        "users": 0,
    }

    groups: dict[str, Group] = {}
    for slug, name, kind, parent in GROUPS:
        group = Group.objects.filter(slug=slug).first()
        if group is None:
            group = accounts.create_group(
                name=name,
                slug=slug,
                kind=kind,
                parent=groups.get(parent),
                cost_centre=COST_CENTRES.get(slug, ""),
            )
            created["groups"] += 1
        groups[slug] = group

    gpu_types = {}
    for name, memory, generation in GPU_TYPES:
        gpu_types[name] = GpuType.objects.filter(name=name).first() or pools.create_gpu_type(
            name=name, memory_gb=memory, generation=generation
        )

    pool_objects: dict[str, Pool] = {}
    for name, kind, gpu_type, capacity, region, country in POOLS:
        pool = Pool.objects.filter(name=name).first()
        if pool is None:
            pool = pools.create_pool(
                name=name,
                kind=kind,
                gpu_type=gpu_types[gpu_type],
                capacity=capacity,
                region=region,
                country=country,
                now=SINCE_EVER,
                reason="demo estate",
            )
            created["pools"] += 1
        pool_objects[name] = pool
    if not CloudPool.objects.filter(pool=pool_objects[CLOUD_POOL]).exists():
        autoscaled(pool_objects[CLOUD_POOL])
        created["cloud pools"] += 1

    profiles: dict[str, Profile] = {}
    for name, gpus, weight, from_task, pool_names, description in PROFILES:
        profile = Profile.objects.filter(name=name).first()
        if profile is None:
            sovereign, memory, generation = PROFILE_CONSTRAINTS.get(name, ("", None, None))
            profile = policies.create_profile(
                name=name,
                gpus=Decimal(gpus),
                time_weight=Decimal(weight),
                size_from_task=from_task,
                pools=[pool_objects[p] for p in pool_names],
                description=description,
                sovereign_country=sovereign,
                min_gpu_memory_gb=memory,
                min_gpu_generation=generation,
            )
            created["profiles"] += 1
        profiles[name] = profile

    policy_objects: dict[str, ResourcePolicy] = {}
    for slug, _, _, _ in GROUPS:
        reservation, limit, hours, period = POLICIES[slug]
        policy = ResourcePolicy.objects.filter(group=groups[slug]).first()
        if policy is None:
            policy = policies.create_policy(
                group=groups[slug],
                reservation=reservation,
                limit=limit,
                budget_hours=hours,
                budget_period=period,
            )
            created["policies"] += 1
        policy_objects[slug] = policy
        if slug in MONEY_WINDOWS and not money_windows.money_budgets_of(policy):
            money_windows.set_money_windows(policy, MONEY_WINDOWS[slug])

    for slug, profile_names in COMPUTE_RESOURCES.items():
        for profile_name in profile_names:
            policy, profile = policy_objects[slug], profiles[profile_name]
            if not ComputeResource.objects.filter(policy=policy, profile=profile).exists():
                policies.connect(policy=policy, profile=profile)
                created["compute resources"] += 1

    for slug, names in PROJECTS.items():
        for name in names:
            if not Project.objects.filter(group=groups[slug], name=name).exists():
                accounts.create_project(group=groups[slug], name=name)

    for gpu_type, amount in PRICES:
        kept = Price.objects.filter(gpu_type=gpu_types[gpu_type], currency="EUR", effective_from=PRICES_FROM)
        if not kept.exists():
            pricing.create_price(
                gpu_type=gpu_types[gpu_type],
                per_gpu_hour=Decimal(amount),
                effective_from=PRICES_FROM,
                currency="EUR",
                via="system",
            )
    seed_node_prices()
    seed_sessions(profiles)

    for demo in DEMO_USERS:
        user = User.objects.filter(username=demo.username).first()
        if user is None:
            first, last = demo.full_name.split(" ", 1)
            user = User.objects.create_user(
                username=demo.username,
                email=f"{demo.username}@acme.example",
                password=password or demo_password(),
                first_name=first,
                last_name=last,
            )
            created["users"] += 1
        accounts.add_membership(user=user, group=groups[demo.group], role=demo.role)
    return created


# Demo figures per node-hour (EUR) of the cloud pool's instance type, not any provider's list price.
NODE_PRICES = [("spot", "9.50"), ("on-demand", "27.20")]


def seed_node_prices() -> None:
    """Price the demo cloud pool's instance type per node-hour, spot and on demand, once."""
    name = CLOUD_INSTANCE_TYPE[0]
    for market, amount in NODE_PRICES:
        kept = NodePrice.objects.filter(
            instance_type=name, market=market, currency="EUR", effective_from=PRICES_FROM
        )
        if not kept.exists():
            pricing.create_node_price(
                instance_type=name,
                market=market,
                per_node_hour=Decimal(amount),
                effective_from=PRICES_FROM,
                currency="EUR",
                via="system",
            )


# The demo's session kind and the idle limits of the profile meant for sessions (docs/sessions.md).
SESSION_PROFILE = "a100-quarter"
SESSION_LIMITS = {"max_lifetime_s": 8 * 3600, "cpu_idle_s": 1800, "jupyter_idle_s": 3600}


# Opened through the session gateway (docs/sessions.md): JupyterLab, its editor and terminal as the
# IDE (code-server is packaged neither in Debian nor on PyPI), and a desktop (noVNC, Debian's packages).
DESKTOP = ["{python}", "-m", "klique.worker.desktop", "--port", "{port}"]
SESSION_KINDS = (
    {"name": "JupyterLab", "open_path": "lab", "description": "Notebooks, consoles and files."},
    {
        "name": "JupyterLab editor (IDE)",
        "open_path": "lab/tree",
        "description": "JupyterLab's code editor, terminal and debugger, opened on your files.",
    },
    {
        "name": "Desktop",
        "type": SessionKind.Type.PORT,
        "ready_path": "/vnc.html",
        "strip_base_url": True,
        "open_path": "vnc.html?autoconnect=1&resize=remote&path={base_path}websockify",
        "description": "A Linux desktop in the browser (noVNC); the worker needs Debian's xvfb x11vnc xterm "
        "novnc websockify.",
    },
)


def seed_sessions(profiles: dict) -> None:
    """The demo's session kinds and idle limits for the sessions profile, once."""
    for fields in SESSION_KINDS:
        if not SessionKind.objects.filter(name=fields["name"]).exists():
            command = [sys.executable if arg == "{python}" else arg for arg in DESKTOP]
            validated_save(SessionKind(**fields, command=command if fields.get("type") else []))
    if not ProfileIdleLimits.objects.filter(profile=profiles[SESSION_PROFILE]).exists():
        validated_save(ProfileIdleLimits(profile=profiles[SESSION_PROFILE], **SESSION_LIMITS))


def autoscaled(pool: Pool) -> CloudPool:
    """Make the demo's cloud pool grow and shrink on the local provider; its declared capacity
    becomes the instance type's maximum."""
    name, gpus, most = CLOUD_INSTANCE_TYPE
    cloud_pool = cloud.create_cloud_pool(
        pool=pool,
        provider="local",
        settings={
            "folder": cloud_folder(),
            "instance_types": {name: gpus},
            "max_nodes": most,
            "kill_after_s": 10,
        },
        **CLOUD_TIMEOUTS,
    )
    cloud.add_instance_type(cloud_pool, name=name, gpus=gpus, max_count=most, spot=True)
    return cloud_pool
