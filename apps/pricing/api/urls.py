from django.urls import path

from apps.pricing.api import views

urlpatterns = [
    path("", views.PriceList.as_view(), name="api-prices"),
]
