"""Whether a pool can be in a profile's pool list: its country against a sovereign profile, its GPU
type against the profile's minimum memory and generation. Pure: read by the rules that validate
profiles and pools, and by the pool order IT is offered."""

from django.core.exceptions import ObjectDoesNotExist


def related(obj, name: str):
    """``obj.name``, or None when it is not set (an unsaved form's row)."""
    try:
        return getattr(obj, name)
    except ObjectDoesNotExist:
        return None


def pool_fit(profile, pool) -> list[tuple[str, str]]:
    """Why ``pool`` cannot be in ``profile``'s pool list, as (the profile's requirement field,
    reason): a sovereign profile lists only pools in its country; a profile with a minimum GPU
    memory or generation only pools whose GPU type meets it. Empty when it fits."""
    reasons = []
    sovereign = (profile.sovereign_country or "").strip().upper()
    country = (pool.country or "").strip().upper()
    if sovereign and country != sovereign:
        where = f"is in {country}" if country else "has no country"
        reasons.append(
            (
                "sovereign_country",
                f"Pool {pool} {where}, and profile {profile} is sovereign to {sovereign}: "
                f"it lists only pools in {sovereign}.",
            )
        )
    gpu = related(pool, "gpu_type")
    if gpu is None:
        return reasons
    if profile.min_gpu_memory_gb and gpu.memory_gb < profile.min_gpu_memory_gb:
        reasons.append(
            (
                "min_gpu_memory_gb",
                f"Pool {pool} has GPU type {gpu} with {gpu.memory_gb} GB, below the minimum GPU memory "
                f"of profile {profile} ({profile.min_gpu_memory_gb} GB).",
            )
        )
    if profile.min_gpu_generation and gpu.generation < profile.min_gpu_generation:
        reasons.append(
            (
                "min_gpu_generation",
                f"Pool {pool} has GPU type {gpu} of generation {gpu.generation}, below the minimum GPU "
                f"generation of profile {profile} ({profile.min_gpu_generation}).",
            )
        )
    return reasons
