from rest_framework.routers import SimpleRouter

from apps.governance.api import views, views_loans

router = SimpleRouter()
router.register("change-requests", views.ChangeRequestViewSet, basename="api-change-request")
router.register("loans", views_loans.LoanViewSet, basename="api-loan")

urlpatterns = router.urls
