"""The cloud app's API routes under ``/api/v1/cloud/``."""

from rest_framework.routers import SimpleRouter

from apps.cloud import api_bills

router = SimpleRouter()
router.register("cloud/bills", api_bills.CloudBillViewSet, basename="api-cloud-bill")

urlpatterns = router.urls
