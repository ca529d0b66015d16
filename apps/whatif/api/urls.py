from rest_framework.routers import SimpleRouter

from apps.whatif.api import advisor, views

router = SimpleRouter()
router.register("whatif-runs", views.WhatIfRunViewSet, basename="api-whatif-run")
router.register("advisor-proposals", advisor.AdvisorProposalViewSet, basename="api-advisor-proposal")

urlpatterns = router.urls
