from django.urls import path

from apps.pricing.api import views

urlpatterns = [
    path("", views.PriceList.as_view(), name="api-prices"),
    path("nodes/", views.NodePriceList.as_view(), name="api-node-prices"),
]
