"""The subscriptions API: validate, call a service, serialize (a secret only as it is made)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from accounts.api import DatacenterAPIView
from accounts.serializers import ErrorSerializer

from . import services
from .serializers import (
    NotificationSerializer,
    SubscriptionCreatedSerializer,
    SubscriptionSerializer,
    SubscriptionWriteSerializer,
)

ERRORS = {code: ErrorSerializer for code in (400, 401, 403, 404)}


class SubscriptionListView(DatacenterAPIView):
    @extend_schema(responses={200: SubscriptionSerializer(many=True), **ERRORS},
                   summary="Your notification subscriptions in this datacenter")
    def get(self, request):
        return Response(SubscriptionSerializer(
            services.subscription_list(request.user, self.datacenter)
            .select_related("datacenter"), many=True).data)

    @extend_schema(request=SubscriptionWriteSerializer,
                   responses={201: SubscriptionCreatedSerializer, **ERRORS},
                   summary="Subscribe to events (paddlectl notify add)")
    def post(self, request):
        subscription, secret = services.subscription_create(request.user, self.datacenter,
                                                            request.data)
        subscription.secret = secret
        return Response(SubscriptionCreatedSerializer(subscription).data,
                        status=status.HTTP_201_CREATED)


class SubscriptionDetailView(DatacenterAPIView):
    @extend_schema(responses={200: SubscriptionSerializer, **ERRORS}, summary="One subscription")
    def get(self, request, pk: str):
        return Response(SubscriptionSerializer(
            services.subscription_get(request.user, self.datacenter, pk)).data)

    @extend_schema(responses={204: None, **ERRORS}, summary="Remove a subscription")
    def delete(self, request, pk: str):
        services.subscription_delete(request.user, self.datacenter, pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SubscriptionTestView(DatacenterAPIView):
    @extend_schema(request=None, responses={202: NotificationSerializer, **ERRORS},
                   summary="Send a test notification (paddlectl notify test)")
    def post(self, request, pk: str):
        notification = services.subscription_test(request.user, self.datacenter, pk)
        return Response(NotificationSerializer(notification).data,
                        status=status.HTTP_202_ACCEPTED)
