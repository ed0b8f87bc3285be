from django.urls import path

from . import views

# PUT/GET /api/v1/pfs/content and PATCH /api/v1/pfs/uploads/{id} carry the bytes: they are
# answered by pfs.transfer before Django (see paddlecloud/asgi.py).
urlpatterns = [
    path("pfs/files", views.FilesView.as_view(), name="api-pfs-files"),
    path("pfs/stat", views.StatView.as_view(), name="api-pfs-stat"),
    path("pfs/mkdir", views.MkdirView.as_view(), name="api-pfs-mkdir"),
    path("pfs/usage", views.UsageView.as_view(), name="api-pfs-usage"),
    path("pfs/uploads", views.UploadListView.as_view(), name="api-pfs-uploads"),
    path("pfs/uploads/<uuid:upload_id>", views.UploadDetailView.as_view(),
         name="api-pfs-upload"),
]
