"""Reads of change requests: who may ask for a group, who decides a request, and which requests a
person sees (their own and those they may decide)."""

from django.db.models import Q, QuerySet

from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import groups_with_role, has_role, subtree_ids
from apps.governance.models import ChangeRequest
from apps.policies.loans import common_group

Role = Membership.Role
Kind = Group.Kind
TEAM_KINDS = {Kind.TEAM, Kind.PROJECT}
LEADERSHIP_KINDS = {Kind.BUSINESS_UNIT, Kind.ORGANISATION}


def _holds_over(user: User, group: Group, *wanted: str) -> bool:
    """The user holds one of ``wanted`` on ``group`` or on a group above it."""
    return group.pk in subtree_ids(groups_with_role(user, *wanted))


def may_ask(user: User, group: Group) -> bool:
    """A team lead for their team (and the project groups below it); a department head for their
    department or a group below it; leadership for a business unit or the organisation. IT changes
    policies directly in the admin and asks no one."""
    if not user.is_authenticated:
        return False
    if group.kind in TEAM_KINDS:
        return _holds_over(user, group, Role.TEAM_LEAD, Role.DEPARTMENT_HEAD)
    if group.kind == Kind.DEPARTMENT:
        return _holds_over(user, group, Role.DEPARTMENT_HEAD)
    return _holds_over(user, group, Role.LEADERSHIP)


def may_accept_proposal(user: User, group: Group) -> bool:
    """Who may accept a quota advisor's proposal for ``group`` as a change request (apps.whatif):
    a department head for their department's groups, leadership for any group below them."""
    if not user.is_authenticated:
        return False
    if group.kind in TEAM_KINDS or group.kind == Kind.DEPARTMENT:
        if _holds_over(user, group, Role.DEPARTMENT_HEAD):
            return True
    return _holds_over(user, group, Role.LEADERSHIP)


def groups_to_ask_for(user: User) -> QuerySet:
    """The groups the user may file a request for (for the forms)."""
    candidates = Group.objects.filter(pk__in=subtree_ids(groups_with_role(user, *ASKING_ROLES)))
    return candidates.filter(pk__in=[g.pk for g in candidates if may_ask(user, g)])


ASKING_ROLES = (Role.TEAM_LEAD, Role.DEPARTMENT_HEAD, Role.LEADERSHIP)


def _nearest(group: Group, kinds: set[str]) -> Group | None:
    return next((g for g in group.ancestors() if g.kind in kinds), None)


def approver_role_and_group(request: ChangeRequest) -> tuple[str, Group | None]:
    """Who decides ``request``: the owner of the envelope above its group, as (role, group). The
    holders of the role on that group or on a group above it decide; group None means the estate
    (every IT admin).

    * A new compute resource, or a request for a business unit or the organisation: IT
      (``it_admin``), which runs the estate.
    * A team's (or project group's) request: the department heads of its nearest department.
    * A department's request: leadership of its nearest business unit (or of the organisation).
    * Where that level is missing in the tree, the next one up decides (a team directly under a
      business unit goes to leadership; with no business unit or organisation above, IT).
    * Nobody decides their own request: when the requester holds the routed role over that group
      (a department head asking for a team below them), the request goes one level up.
    * A loan goes to the owner of the nearest group above both sides (``loans.common_group``):
      its department heads for a department, its leadership for a business unit or the
      organisation; for two groups of one team, as the team's own request.
    """
    group = request.group
    if request.kind == ChangeRequest.Kind.LOAN and request.lender_id:
        group = common_group(request.lender, group) or group
        if group.kind in LEADERSHIP_KINDS:
            return _route(request, [(Role.LEADERSHIP, group)])
        if group.kind == Kind.DEPARTMENT:
            return _route(
                request, [(Role.DEPARTMENT_HEAD, group), (Role.LEADERSHIP, _nearest(group, LEADERSHIP_KINDS))]
            )
    if request.kind == ChangeRequest.Kind.COMPUTE_RESOURCE or group.kind in LEADERSHIP_KINDS:
        return Role.IT_ADMIN, None
    steps = []
    if group.kind in TEAM_KINDS:
        steps.append((Role.DEPARTMENT_HEAD, _nearest(group, {Kind.DEPARTMENT})))
    steps.append((Role.LEADERSHIP, _nearest(group, LEADERSHIP_KINDS)))
    return _route(request, steps)


def _route(request: ChangeRequest, steps) -> tuple[str, Group | None]:
    """The first step whose group exists and whose role the requester does not hold there; IT
    when none is left."""
    for role, owner in steps:
        if owner is None:
            continue
        if request.requester_id and _holds_over(request.requester, owner, role):
            continue
        return role, owner
    return Role.IT_ADMIN, None


def approvers(request: ChangeRequest) -> QuerySet:
    """The people who may decide ``request`` (never its requester)."""
    users = User.objects.filter(is_active=True)
    if request.approver_role == Role.IT_ADMIN:
        users = users.filter(Q(memberships__role=Role.IT_ADMIN) | Q(is_superuser=True))
    else:
        above = [request.approver_group, *request.approver_group.ancestors()]
        users = users.filter(
            memberships__role=request.approver_role, memberships__group__in=[g.pk for g in above]
        )
    return users.exclude(pk=request.requester_id).distinct()


def may_decide(user: User, request: ChangeRequest) -> bool:
    if not user.is_authenticated or user.pk == request.requester_id:
        return False
    if request.approver_role == Role.IT_ADMIN:
        return has_role(user, Role.IT_ADMIN)
    return _holds_over(user, request.approver_group, request.approver_role)


def _decidable_q(user: User) -> Q:
    """Requests routed to a role the user holds over the routed group (their own excluded)."""
    found = Q(pk__in=[])
    if has_role(user, Role.IT_ADMIN):
        found |= Q(approver_role=Role.IT_ADMIN)
    for role in (Role.DEPARTMENT_HEAD, Role.LEADERSHIP):
        groups = subtree_ids(groups_with_role(user, role))
        if groups:
            found |= Q(approver_role=role, approver_group__in=groups)
    return found & ~Q(requester=user)


def requests_of(user: User) -> QuerySet:
    """The requests the user filed."""
    return _rows().filter(requester=user)


def requests_to_decide(user: User) -> QuerySet:
    """The pending requests the user may decide."""
    if not user.is_authenticated:
        return ChangeRequest.objects.none()
    return _rows().filter(_decidable_q(user), state=ChangeRequest.State.PENDING)


def visible_requests(user: User) -> QuerySet:
    """The user's own requests and every request (any state) routed to them."""
    if not user.is_authenticated:
        return ChangeRequest.objects.none()
    return _rows().filter(Q(requester=user) | _decidable_q(user))


def _rows() -> QuerySet:
    return ChangeRequest.objects.select_related("requester", "group", "approver", "profile", "approver_group")
