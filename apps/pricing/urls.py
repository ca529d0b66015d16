from django.urls import path

from apps.pricing import views

app_name = "pricing"

urlpatterns = [
    path("", views.prices, name="prices"),
    path("new/", views.price_create, name="create"),
    path("<int:pk>/edit/", views.price_edit, name="edit"),
    path("<int:pk>/delete/", views.price_delete, name="delete"),
    path("changes/", views.price_changes, name="changes"),
    path("nodes/new/", views.node_price_create, name="node-create"),
    path("nodes/<int:pk>/edit/", views.node_price_edit, name="node-edit"),
    path("nodes/<int:pk>/delete/", views.node_price_delete, name="node-delete"),
]
