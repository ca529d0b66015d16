from rest_framework.routers import SimpleRouter

from apps.whatif.api import views

router = SimpleRouter()
router.register("whatif-runs", views.WhatIfRunViewSet, basename="api-whatif-run")

urlpatterns = router.urls
