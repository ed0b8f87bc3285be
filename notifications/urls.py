from django.urls import path

from . import views

urlpatterns = [
    path("notifications/subscriptions/", views.SubscriptionListView.as_view(),
         name="api-subscriptions"),
    path("notifications/subscriptions/<str:pk>/", views.SubscriptionDetailView.as_view(),
         name="api-subscription"),
    path("notifications/subscriptions/<str:pk>/test", views.SubscriptionTestView.as_view(),
         name="api-subscription-test"),
]
