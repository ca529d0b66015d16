from django.urls import path

from apps.pricing import views

app_name = "pricing"

urlpatterns = [
    path("", views.prices, name="prices"),
    path("new/", views.price_create, name="create"),
    path("<int:pk>/edit/", views.price_edit, name="edit"),
    path("<int:pk>/delete/", views.price_delete, name="delete"),
    path("changes/", views.price_changes, name="changes"),
]
